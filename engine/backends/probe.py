"""The probe: read facts from every backend, derive capabilities, optionally self-test. NEVER raises.

Each backend yields a ProbeResult; when it is unavailable, `reason` says exactly why (library not found
and where we looked, no device, driver too old, ...). Facts come from the device; the derivation lives
only in policy.py.
"""
from __future__ import annotations

import sys
import time

from ..errors import BackendUnavailableError
from . import kernel_plan, policy
from .base import Backend
from .facts import DeviceFacts, ProbeResult
from .registry import BACKENDS, make_binding
from .runtime.binding import ATTRIBUTES

# The primitives AsyncOutput's pinned-staging path is made of.
PINNED_STAGING = ("alloc_pinned", "copy_d2h_async", "create_stream", "create_event", "record_event",
                  "stream_wait_event", "synchronize_event")


def implements(cls: type, methods) -> bool:
    """True when `cls` has concrete code for every method (none abstract, none marked not implemented)."""
    for m in methods:
        fn = getattr(cls, m, None)
        if fn is None or getattr(fn, "__isabstractmethod__", False) or getattr(fn, "not_implemented", False):
            return False
    return True


def probe(name: str, device: int = 0, host_read_checks: bool = True, self_test: bool = False) -> ProbeResult:
    start = time.perf_counter()
    try:
        result = _probe_cpu(name) if BACKENDS[name].binding_module is None else \
            _probe_gpu(name, device, host_read_checks)
        if self_test and result.available:
            from .registry import create
            from .selftest import run_self_test
            backend = create(name, device)
            try:
                result.self_test = run_self_test(backend, result.capabilities.readback_path)
            finally:
                backend.close()
    except BackendUnavailableError as e:
        result = ProbeResult(name, False, getattr(e, "reason", None) or str(e), kernels=getattr(e, "kernels", ""),
                             advice=what_to_do(BACKENDS[name].api, e))
    except Exception as e:     # the probe reports; a diagnostics page must never crash
        result = ProbeResult(name, False, f"{type(e).__name__}: {e}", advice=UNEXPECTED_ADVICE)
    result.seconds = round(time.perf_counter() - start, 4)
    return result


def probe_all(host_read_checks: bool = True, self_test: bool = False) -> list[ProbeResult]:
    return [probe(n, host_read_checks=host_read_checks, self_test=self_test) for n in BACKENDS]


def _probe_cpu(name: str) -> ProbeResult:
    import numpy as np

    from .cpu import CpuBackend
    facts = DeviceFacts(name, "cpu", sys.platform, name="host CPU", arch="numpy", integrated=True,
                        runtime_version=f"numpy {np.__version__}",
                        implements_pinned_staging=implements(CpuBackend, PINNED_STAGING),
                        device_host_read="not run: host memory", managed_host_read="not run: host memory")
    info = CpuBackend().memory_info()
    facts.total_memory, facts.free_memory = info.total, info.free
    return ProbeResult(name, True, "numpy on the host CPU", facts, policy.derive(facts),
                       kernels=kernel_plan.plan("cpu", None, None, None).line)


def _probe_gpu(name: str, device: int, host_read_checks: bool) -> ProbeResult:
    from .gpu import GpuBackend
    rt = make_binding(name)
    rt.load()                                   # BackendUnavailableError: library missing, with where we looked
    facts = DeviceFacts(name, rt.api, sys.platform, library_path=rt.library_path,
                        implements_pinned_staging=implements(GpuBackend, PINNED_STAGING),
                        implements_zero_copy=implements(GpuBackend, ("zero_copy_view",)))
    try:
        facts.runtime_version = str(rt.runtime_version())
        facts.driver_version = str(rt.driver_version())
    except Exception as e:
        facts.errors.append(f"versions: {e}")
    from .kernels.prebuilt import load_manifest
    manifest = load_manifest()
    try:
        rtc_version, rtc_error = rt.rtc_version(), ""
        facts.rtc_library_path = f"{rtc_version} at {rt.rtc_library_path}"
    except Exception as e:
        rtc_version, rtc_error = None, str(e)
        facts.rtc_library_path = f"unavailable: {e}"
    try:
        count = rt.device_count()               # no device / driver too old: the runtime's own name and text
    except BackendUnavailableError as e:
        e.reason = f"{getattr(e, 'reason', None) or e} (runtime: {rt.library_path})"
        e.kernels = kernel_plan.plan(rt.api, None, manifest, rtc_version, rtc_error).line   # what it would load
        raise
    if count <= device:
        return ProbeResult(name, False, f"{count} devices; device {device} not present", facts,
                           advice=_no_device_advice(rt.api))
    rt.set_device(device)
    facts.library_path = rt.library_path
    _read(facts, "name", lambda: rt.device_name(device))
    _read(facts, "arch", lambda: rt.device_arch(device))
    for attr in ATTRIBUTES:
        if hasattr(facts, attr):
            _read(facts, attr, lambda a=attr: bool(rt.device_attribute(a, device)))
    try:
        facts.free_memory, facts.total_memory = rt.mem_info()
    except Exception as e:
        facts.errors.append(f"memory info: {e}")
    if not host_read_checks:
        facts.device_host_read = facts.managed_host_read = "not run: disabled by the caller"
    elif not policy.derive(facts).unified_memory.value:
        facts.device_host_read = facts.managed_host_read = "not run: the attributes already rule it out"
    else:
        from .host_read_check import run_in_child
        facts.device_host_read = run_in_child(name, "device")
        facts.managed_host_read = run_in_child(name, "managed")
    caps = policy.derive(facts)
    reason = f"{facts.name} ({facts.arch}), {rt.api} runtime {facts.runtime_version}, {rt.library_path}"
    kernels = kernel_plan.plan(rt.api, facts.arch or None, manifest, rtc_version, rtc_error).line
    return ProbeResult(name, True, reason, facts, caps, kernels=kernels)


# -- what the user can do about an unavailable backend (the Diagnostics view and report show it beside the reason)
_DRIVER = {"hip": "the AMD GPU driver (Windows: AMD Software: Adrenalin Edition, which installs amdhip64; "
                  "Linux: ROCm)",
           "cuda": "the NVIDIA GPU driver"}
_VENDOR = {"hip": "AMD", "cuda": "NVIDIA"}
UNEXPECTED_ADVICE = "The probe itself failed: please attach this report (Copy report) to a bug report."


def what_to_do(api: str, e: BackendUnavailableError) -> str:
    """One sentence of advice for `e`, chosen by what was missing or the runtime's status name (never its text)."""
    from .runtime.status import normalise
    if api not in _DRIVER:
        return UNEXPECTED_ADVICE
    if e.missing == "binding":
        return (f"Nothing needed: this optional Python package is not part of the app; the ctypes-{api} backend "
                f"reaches the same {api.upper()} runtime without it.")
    restart = "then restart Halo Chat."
    if e.missing == "runtime":
        return f"Install or update {_DRIVER[api]}, {restart} {_without(api)}"
    status = normalise(getattr(e, "error_name", "") or "")
    if "nodevice" in status:
        return _no_device_advice(api)
    if "driver" in status:      # insufficient driver, system driver mismatch
        return f"Update {_DRIVER[api]}: it is older than its runtime needs; {restart}"
    return f"Update {_DRIVER[api]}, {restart} If it stays, attach this report (Copy report) to a bug report."


def _no_device_advice(api: str) -> str:
    groups = " and that your user is in the 'render' and 'video' groups" if sys.platform.startswith("linux") else ""
    return (f"The {api.upper()} runtime is installed but finds no GPU it supports: update {_DRIVER[api]}, check "
            f"that it supports your GPU{groups}, then restart Halo Chat. {_without(api)}")


def _without(api: str) -> str:
    return f"Without an {_VENDOR[api]} GPU there is nothing to do: Halo Chat runs on the CPU."


def _read(facts: DeviceFacts, field: str, read) -> None:
    try:
        setattr(facts, field, read())
    except Exception as e:    # an attribute we cannot read stays None ("unknown" = no) with the reason kept
        facts.errors.append(f"{field}: {e}")


def backend_class_for(name: str) -> type[Backend]:
    from .cpu import CpuBackend
    from .gpu import GpuBackend
    return CpuBackend if BACKENDS[name].binding_module is None else GpuBackend
