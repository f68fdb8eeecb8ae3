"""The one place where probed facts become capabilities. Pure: facts in, capabilities (each with its
reason) out; no device, no I/O. Unit-tested on a table of machines in tests/backend/test_policy.py.

The rules, from docs/ORIGIN.md:
- Nothing is true because a GPU is integrated. Sharing physical memory is not host addressability.
- device_memory_host_addressable needs the attributes AND a live host read, in a child process, of
  device-written memory of the kind the engine's buffers are (plain device allocations). A passing read of
  *managed* memory proves nothing about those (a discrete NVIDIA GPU passes it and segfaults on the other).
  Unknown counts as no.
- async_sampled_token_readback is true only where the backend implements the pinned-staging path.
- zero-copy is chosen only where it is proven and the backend implements it; otherwise the pinned copy.
"""
from __future__ import annotations

from .facts import Capabilities, Capability, DeviceFacts

ZERO_COPY = "zero-copy"
PINNED_COPY = "pinned D2H copy"
NO_PATH = "none"


def _yes(value: bool | None) -> bool:
    return value is True


def _show(name: str, value: bool | None) -> str:
    return f"{name}={'unknown' if value is None else int(bool(value))}"


def derive(f: DeviceFacts) -> Capabilities:
    if f.api == "cpu":
        return _cpu(f)
    unified = _unified_memory(f)
    addressable = _host_addressable(f)
    readback = Capability(
        f.implements_pinned_staging,
        "the backend implements the pinned-staging readback (fork event, copy stream, pinned D2H, ready event)"
        if f.implements_pinned_staging else
        "this backend does not implement the pinned-staging readback, so async scheduling must stay off")
    path, why = _readback_path(f, addressable, readback)
    return Capabilities(unified, addressable, readback, path, why)


def _unified_memory(f: DeviceFacts) -> Capability:
    """One allocation usable by host and device at one address, coherently."""
    facts = ", ".join(_show(n, getattr(f, n)) for n in (
        "unified_addressing", "managed_memory", "pageable_memory_access", "concurrent_managed_access"))
    ok = _yes(f.unified_addressing) and _yes(f.managed_memory) and (
        _yes(f.pageable_memory_access) or _yes(f.concurrent_managed_access))
    if ok:
        return Capability(True, f"managed memory is coherent between host and device ({facts})")
    why = f"needs unified addressing, managed memory, and pageable or concurrent managed access ({facts})"
    if _yes(f.integrated):
        why += "; the GPU is integrated, but sharing physical memory does not make device memory host-visible"
    return Capability(False, why)


def _host_addressable(f: DeviceFacts) -> Capability:
    attributes = _unified_memory(f)
    if not attributes.value:
        return Capability(False, f"attributes do not allow it: {attributes.reason}")
    if f.device_host_read != "passed":
        managed = f" (managed memory, which the engine does not use for its buffers: {f.managed_host_read})" \
            if f.managed_host_read == "passed" else ""
        return Capability(False, f"attributes allow it, but the live host read of a plain device allocation in a "
                                 f"child process did not pass ({f.device_host_read}){managed}")
    return Capability(True, "attributes allow it and a child process read a device-written plain device allocation")


def _readback_path(f: DeviceFacts, addressable: Capability, readback: Capability) -> tuple[str, str]:
    if addressable.value and f.implements_zero_copy:
        return ZERO_COPY, "device memory is proven host-addressable and the backend implements zero-copy"
    if readback.value:
        if addressable.value:
            return PINNED_COPY, "host addressability is proven, but this backend implements only the pinned copy"
        return PINNED_COPY, "device memory is not proven host-addressable: ids come back by an async copy " \
                            "into pinned memory behind a ready event"
    return NO_PATH, "no safe readback path is implemented: sampled ids must not be read asynchronously"


def _cpu(f: DeviceFacts) -> Capabilities:
    same = "the CPU backend's device memory is host memory"
    readback = Capability(f.implements_pinned_staging,
                          "implements the same pinned-staging readback shape as the GPU backends"
                          if f.implements_pinned_staging else "pinned-staging readback not implemented")
    path = (PINNED_COPY, "the CPU backend copies through the same AsyncOutput shape as the GPU (a memcpy)") \
        if readback.value else (NO_PATH, "no readback path implemented")
    return Capabilities(Capability(True, same), Capability(True, same), readback, *path)
