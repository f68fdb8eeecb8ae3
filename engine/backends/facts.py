"""Plain, serializable records: what a probe measured (facts), what the policy derived (capabilities), and
the self-test's outcome. The diagnostics view renders these, also for other machines' reports, so every
record round-trips through to_dict()/from_dict() (JSON-safe: str, int, float, bool, None, lists, dicts).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


class Record:
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        kwargs = {}
        for f in dataclasses.fields(cls):
            if f.name not in data:
                continue
            value = data[f.name]
            nested = _NESTED.get((cls.__name__, f.name))
            if nested is not None and value is not None:
                value = nested.from_dict(value)
            kwargs[f.name] = value
        return cls(**kwargs)


@dataclass
class DeviceFacts(Record):
    """Facts read from the runtime and device; None means the query failed (the reason is in `errors`)."""
    backend: str                      # "cuda-python", "ctypes-hip", ... or "cpu"
    api: str                          # "cuda", "hip", "cpu"
    platform: str                     # sys.platform of the machine probed: "win32", "linux"
    name: str = ""
    arch: str = ""                    # "gfx1151", "sm_90", "numpy"
    integrated: bool | None = None
    total_memory: int | None = None
    free_memory: int | None = None
    pageable_memory_access: bool | None = None
    pageable_memory_access_uses_host_page_tables: bool | None = None
    managed_memory: bool | None = None
    concurrent_managed_access: bool | None = None
    can_map_host_memory: bool | None = None
    unified_addressing: bool | None = None
    runtime_version: str = ""
    driver_version: str = ""
    library_path: str = ""
    rtc_library_path: str = ""
    # Measured, not read (engine.backends.host_read_check): a child process had the device write memory of
    # one allocation kind and read it on the host. "passed", "failed: <why>", or "not run: <why>".
    # device_host_read is the kind the engine's buffers are (plain device allocations) and decides host
    # addressability; managed_host_read is reported as its own fact and decides nothing by itself.
    device_host_read: str = "not run"
    managed_host_read: str = "not run"
    # What this backend's code implements (derived from the code in probe.py, not asserted).
    implements_pinned_staging: bool = False
    implements_zero_copy: bool = False
    errors: list[str] = field(default_factory=list)


@dataclass
class Capability(Record):
    value: bool
    reason: str


@dataclass
class Capabilities(Record):
    unified_memory: Capability
    device_memory_host_addressable: Capability
    async_sampled_token_readback: Capability
    readback_path: str                # "zero-copy", "pinned D2H copy", or "none"
    readback_reason: str


@dataclass
class SelfTestResult(Record):
    backend: str
    passed: bool
    readback_path: str = ""
    steps: int = 0
    ids_per_step: int = 0
    mismatches: int = 0
    compile_seconds: float | None = None
    kernel_from_cache: bool | None = None
    step_us_median: float | None = None     # launch + fork + copy-stream wait + D2H + ready sync, per step
    step_us_p90: float | None = None
    seconds: float = 0.0
    error: str = ""


@dataclass
class ProbeResult(Record):
    backend: str
    available: bool
    reason: str                       # why not, or a one-line description of the device
    facts: DeviceFacts | None = None
    capabilities: Capabilities | None = None
    self_test: SelfTestResult | None = None
    seconds: float = 0.0
    kernels: str = ""                 # kernel_plan's line: prebuilt / compiled at run time / none and why
    advice: str = ""                  # unavailable: what the user can do about it (probe.what_to_do)

    def summary_line(self) -> str:
        if not self.available:
            return f"FAIL {self.backend}: {self.reason}"
        verdict = "PASS" if (self.self_test is None or self.self_test.passed) else "FAIL"
        path = self.capabilities.readback_path if self.capabilities else "?"
        extra = ""
        if self.self_test is not None:
            st = self.self_test
            extra = f"; self-test {'ok' if st.passed else 'FAILED: ' + st.error}"
            if st.step_us_median is not None:
                extra += f", {st.step_us_median:.1f} us/step"
        return f"{verdict} {self.backend}: {self.reason}; readback {path}{extra}"


_NESTED = {
    ("Capabilities", "unified_memory"): Capability,
    ("Capabilities", "device_memory_host_addressable"): Capability,
    ("Capabilities", "async_sampled_token_readback"): Capability,
    ("ProbeResult", "facts"): DeviceFacts,
    ("ProbeResult", "capabilities"): Capabilities,
    ("ProbeResult", "self_test"): SelfTestResult,
}
