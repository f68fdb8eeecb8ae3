"""The diagnostics report as plain records, and its two renderings: Markdown (for a bug report) and JSON.

A report is data only (str, int, float, bool, None, lists, dicts once serialized), so a report saved on
one machine opens and renders identically on another: the app's Diagnostics view and the tests build
reports of other machines (the seed's Windows gfx1151 box, an H200) from JSON with `from_dict`.
No Qt, no driver: importing this module loads nothing beyond the backend record types.
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .backends.facts import ProbeResult, Record, SelfTestResult

FORMAT_VERSION = 1

# The probed attributes, in the order the report lists them, with the runtime's attribute names.
ATTRIBUTE_ROWS: tuple[tuple[str, str], ...] = (
    ("integrated", "Integrated"),
    ("pageable_memory_access", "PageableMemoryAccess"),
    ("pageable_memory_access_uses_host_page_tables", "PageableMemoryAccessUsesHostPageTables"),
    ("managed_memory", "ManagedMemory"),
    ("concurrent_managed_access", "ConcurrentManagedAccess"),
    ("can_map_host_memory", "CanMapHostMemory"),
    ("unified_addressing", "UnifiedAddressing"),
)
# The measured host reads (engine.backends.host_read_check), one row each: DeviceFacts field, label.
HOST_READ_ROWS: tuple[tuple[str, str], ...] = (
    ("device_host_read", "device memory host read (child process)"),
    ("managed_host_read", "managed memory host read (child process)"),
)
CAPABILITY_ROWS: tuple[tuple[str, str], ...] = (
    ("unified_memory", "unified memory"),
    ("device_memory_host_addressable", "device memory host-addressable"),
    ("async_sampled_token_readback", "async sampled-token readback"),
)


@dataclass
class SystemInfo(Record):
    os: str = ""                   # "Windows 11 Pro 10.0.26100", "Ubuntu 24.04.2 LTS"
    os_build: str = ""             # Windows build number, or the Linux kernel release
    platform: str = ""             # sys.platform
    machine: str = ""              # "AMD64", "x86_64"
    cpu: str = ""
    cpu_count: int | None = None
    cpu_kernels: str = ""          # the CPU backend's products: numba quantized kernels or numpy float32
    memory_total: int | None = None
    memory_available: int | None = None
    python: str = ""
    python_executable: str = ""
    frozen: bool = False           # running from the PyInstaller bundle
    app_version: str = ""
    libraries: dict[str, str] = field(default_factory=dict)   # distribution -> version or "not installed"


@dataclass
class LogitsCheck(Record):
    """GPU-versus-CPU logits on the first step of a fixed prompt. passed None: not run (see `reason`)."""
    passed: bool | None
    reason: str
    model_path: str = ""
    token_ids: list[int] = field(default_factory=list)
    max_abs_diff: float | None = None
    tolerance: float | None = None
    top1_cpu: int | None = None
    top1_gpu: int | None = None
    top5_overlap: int | None = None
    cpu_seconds: float | None = None
    gpu_seconds: float | None = None


@dataclass
class SelfTestRun(Record):
    """The "Run self-test" outcome for one backend: the readback self-test, then the logits comparison."""
    backend: str
    readback: SelfTestResult
    logits: LogitsCheck | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.readback.passed and (self.logits is None or self.logits.passed is not False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SelfTestRun:
        logits = data.get("logits")
        return cls(data["backend"], SelfTestResult.from_dict(data["readback"]),
                   LogitsCheck.from_dict(logits) if logits else None, data.get("seconds", 0.0))


@dataclass
class DiagnosticsReport(Record):
    created: str                                   # ISO time, local, with offset
    system: SystemInfo
    probes: list[ProbeResult]                      # every backend the app knows, in preference order
    backend_setting: str = "auto"                  # the user's choice: auto, hip, cuda, cpu
    async_setting: bool = True                     # the user's "async scheduling" setting
    selected_backend: str | None = None            # the backend the engine would use, or None
    selected_reason: str = ""
    readback_path: str = "none"
    readback_reason: str = ""
    async_scheduling: bool = False                 # the mode in use
    async_reason: str = ""
    kv_cache_type: str = ""                        # the loaded model's KV cache type as loaded (ModelInfo); ""
                                                   # when none was loaded (or the report predates the field)
    self_test: SelfTestRun | None = None
    descriptions: dict[str, str] = field(default_factory=dict)   # backend -> what it is (binding variant)
    format_version: int = FORMAT_VERSION

    def probe_for(self, backend: str) -> ProbeResult | None:
        return next((p for p in self.probes if p.backend == backend), None)

    def to_json(self) -> str:
        """The report as saved for a bug report: the user's home folder written as ~ (redact_home)."""
        return json.dumps(redact_home(self.to_dict()), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DiagnosticsReport:
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs["system"] = SystemInfo.from_dict(data.get("system") or {})
        kwargs["probes"] = [ProbeResult.from_dict(p) for p in data.get("probes", [])]
        if data.get("self_test"):
            kwargs["self_test"] = SelfTestRun.from_dict(data["self_test"])
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text: str) -> DiagnosticsReport:
        return cls.from_dict(json.loads(text))


# -- privacy -------------------------------------------------------------------------------------------
def redact_home(value, home: str | None = None):
    """`value` (text, or lists and dicts of it) with the user's home folder written as ~: the report is pasted
    into public bug trackers, and paths under home (the app's executable, its models, PATH folders a library
    was looked for in) carry the user name. Either slash and any case match (Windows paths are both);
    the name must end there (/home/alice does not match inside /home/alicea or /home/alice.smith)."""
    home = str(Path.home()) if home is None else home
    parts = [p for p in re.split(r"[\\/]+", home) if p]
    if len(parts) < 2:          # "/" or "C:\": nothing that names a user
        return value
    lead = r"[\\/]" if home[:1] in "\\/" else ""
    pattern = re.compile(lead + r"[\\/]+".join(map(re.escape, parts)) + r"(?![\w-]|\.\w)", re.IGNORECASE)
    return _map_text(value, lambda text: pattern.sub("~", text))


def _map_text(value, fn):
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map_text(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_text(v, fn) for v in value]
    return value


# -- small formatters shared with the app's view -------------------------------------------------------
def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "unknown"
    return f"{n / 2**30:.2f} GiB ({n:,} bytes)"


def system_rows(s: SystemInfo) -> list[tuple[str, str]]:
    """(label, value) rows of the system section; parts that were not recorded are left out."""
    def join(*parts) -> str:
        return ", ".join(str(p) for p in parts if p not in (None, ""))
    os_extra = join(f"build {s.os_build}" if s.os_build else "", s.platform, s.machine)
    py_extra = join(s.python_executable, "frozen bundle" if s.frozen else "")
    return [("OS", f"{s.os or 'unknown'}" + (f" ({os_extra})" if os_extra else "")),
            ("CPU", f"{s.cpu or 'unknown'}" + (f" ({s.cpu_count} logical cores)" if s.cpu_count else "")),
            ("CPU kernels", s.cpu_kernels or "unknown"),
            ("Memory", f"{fmt_bytes(s.memory_total)} total, {fmt_bytes(s.memory_available)} available"),
            ("Python", f"{s.python or 'unknown'}" + (f" ({py_extra})" if py_extra else "")),
            ("Halo Chat", s.app_version or "unknown")]


def fmt_flag(value: bool | None) -> str:
    """A probed attribute as the runtime reported it: 1, 0, or unknown (the query failed)."""
    return "unknown" if value is None else str(int(bool(value)))


def device_kind(integrated: bool | None, api: str) -> str:
    if api == "cpu":
        return "host"
    return {True: "integrated", False: "discrete"}.get(integrated, "unknown")


def _human(attr: str) -> str:
    return attr.replace("_", " ")


def host_addressable_headline(p: ProbeResult) -> str:
    """One line naming the facts that decide host addressability, e.g. for the seed's Windows gfx1151:
    "device memory not host-addressable: pageable memory access = 0, concurrent managed access = 0, ..."."""
    f, c = p.facts, p.capabilities
    if f is None or c is None:
        return f"no device: {p.reason}"
    if f.api == "cpu":
        return "device memory is host memory (CPU backend)"
    if c.device_memory_host_addressable.value:
        return f"device memory host-addressable: proven by the attributes and a live host read ({f.device_host_read})"
    blocking = []
    if f.pageable_memory_access is not True and f.concurrent_managed_access is not True:
        blocking += ["pageable_memory_access", "concurrent_managed_access"]
    blocking += [a for a in ("managed_memory", "unified_addressing") if getattr(f, a) is not True]
    if blocking:
        why = ", ".join(f"{_human(a)} = {fmt_flag(getattr(f, a))}" for a in blocking)
    else:
        why = f"the live host read of a plain device allocation did not pass ({f.device_host_read})"
    if f.integrated:
        why += " (integrated GPU: sharing physical memory does not make device memory host-visible)"
    return f"device memory not host-addressable: {why}"


def self_test_line(st: SelfTestResult) -> str:
    verdict = "PASSED" if st.passed else "FAILED"
    parts = [f"{verdict} ({st.readback_path or 'no path'})"]
    if st.steps and not st.error.startswith("backend unavailable"):
        parts.append(f"{st.steps} steps x {st.ids_per_step} ids, {st.mismatches} mismatches")
    if st.step_us_median is not None:
        parts.append(f"{st.step_us_median:.2f} us/step median"
                     + (f", p90 {st.step_us_p90:.2f}" if st.step_us_p90 is not None else ""))
    if st.compile_seconds is not None:
        parts.append(f"kernel {'from cache' if st.kernel_from_cache else 'compiled'} in {st.compile_seconds:.3f} s")
    parts.append(f"total {st.seconds:.3f} s")
    if st.error:
        parts.append(f"error: {st.error}")
    return "; ".join(parts)


def logits_line(lc: LogitsCheck) -> str:
    verdict = {True: "PASSED", False: "FAILED", None: "NOT RUN"}[lc.passed]
    reason = lc.reason.removeprefix("not run: ") if lc.passed is None else lc.reason   # older reports said it twice
    text = f"{verdict}: {reason}"
    if lc.max_abs_diff is not None:
        text += (f" (max |gpu-cpu| {lc.max_abs_diff:.3g}, tolerance {lc.tolerance:g}; top-1 cpu {lc.top1_cpu} "
                 f"gpu {lc.top1_gpu}; top-5 overlap {lc.top5_overlap}/5)")
    return text


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


# -- Markdown ------------------------------------------------------------------------------------------
def to_markdown(r: DiagnosticsReport) -> str:
    """The whole report, ready to paste into a bug report (GitHub-flavoured Markdown; home folder as ~)."""
    s = r.system
    out = [f"# Halo Chat diagnostics ({r.created})", "", "## System", "",
           "| | |", "|---|---|"]
    out += [f"| {label} | {_cell(value)} |" for label, value in system_rows(s)]
    out += [f"| {name} | {version} |" for name, version in s.libraries.items()]
    out += ["", "## In use", "",
            f"- Backend setting: `{r.backend_setting}`; selected: **{r.selected_backend or 'none'}** "
            f"({r.selected_reason})",
            f"- Readback path: **{r.readback_path}** ({r.readback_reason})",
            f"- Async scheduling: **{'on' if r.async_scheduling else 'off'}** - {r.async_reason} "
            f"(setting: {'on' if r.async_setting else 'off'})"]
    if r.kv_cache_type:
        out.append(f"- KV cache: **{r.kv_cache_type}** (the loaded model's)")
    if r.self_test is not None:
        out += ["", "## Self-test", "", *_self_test_md(r.self_test)]
    out += ["", "## Backends", ""]
    for p in r.probes:
        out += _probe_md(p, r.descriptions.get(p.backend, ""))
    return redact_home("\n".join(out).rstrip() + "\n")


def _self_test_md(run: SelfTestRun) -> list[str]:
    lines = [f"- **{run.backend}: {'PASSED' if run.passed else 'FAILED'}** in {run.seconds:.3f} s",
             f"- Readback: {self_test_line(run.readback)}"]
    if run.logits is not None:
        lines.append(f"- GPU vs CPU logits: {logits_line(run.logits)}")
    return lines


def _probe_md(p: ProbeResult, description: str = "") -> list[str]:
    head = f"### {p.backend}: {'available' if p.available else 'NOT AVAILABLE'}"
    lines = [head, ""] + ([f"_{description}_", ""] if description else []) + [f"{p.reason}", ""]
    if p.advice:
        lines += [f"What to do: {p.advice}", ""]
    if p.kernels:
        lines += [p.kernels, ""]
    if p.available:
        lines += [f"**{host_addressable_headline(p)}**", ""]
    f = p.facts
    if f is not None:
        lines += ["| Fact | Value |", "|---|---|",
                  f"| device | {f.name or '?'} |", f"| arch | {f.arch or '?'} |",
                  f"| kind | {device_kind(f.integrated, f.api)} |",
                  f"| total memory | {fmt_bytes(f.total_memory)} |", f"| free memory | {fmt_bytes(f.free_memory)} |"]
        if f.api != "cpu":
            lines += [f"| {attr} | {fmt_flag(getattr(f, attr))} |" for attr, _ in ATTRIBUTE_ROWS]
        lines += [f"| runtime version | {f.runtime_version or '?'} |",
                  f"| driver version | {f.driver_version or '-'} |",
                  f"| runtime library | {f.library_path or '-'} |",
                  f"| compiler library | {f.rtc_library_path or '-'} |",
                  f"| implements pinned staging | {int(f.implements_pinned_staging)} |",
                  f"| implements zero-copy | {int(f.implements_zero_copy)} |"]
        lines += [f"| {label} | {getattr(f, field)} |" for field, label in HOST_READ_ROWS]
        lines += [f"| query error | {_cell(e)} |" for e in f.errors]
        lines.append("")
    c = p.capabilities
    if c is not None:
        lines += [f"- {label}: **{'yes' if getattr(c, key).value else 'no'}** - {getattr(c, key).reason}"
                  for key, label in CAPABILITY_ROWS]
        lines += [f"- readback path: **{c.readback_path}** - {c.readback_reason}", ""]
    if p.self_test is not None:
        lines += [f"- self-test: {self_test_line(p.self_test)}", ""]
    lines += [f"_probe took {p.seconds:.3f} s_", ""]
    return lines
