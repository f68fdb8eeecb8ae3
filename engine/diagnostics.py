"""Diagnostics: what this machine is, what every backend found, what the engine would use and why, and a
live self-test. The app's Diagnostics view and `python -m engine diagnose` both render what `collect`
and `run_self_test` return (records in engine.diagnostics_report); neither touches a backend itself.

    python -m engine.diagnostics [--json] [--self-test] [--backend auto|hip|cuda|cpu] [--model PATH]

Nothing here raises for a missing driver or device: absent backends are rows with their reason.
No Qt here (engine/ never imports it); PySide6's version is read from package metadata only.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

from . import __version__
from .backends.facts import ProbeResult, SelfTestResult
from .diagnostics_report import DiagnosticsReport, LogitsCheck, SelfTestRun, SystemInfo, to_markdown
from .model.host_memory import host_memory

ASYNC_ENV = "HALO_ASYNC_SCHEDULING"
BACKEND_SETTINGS = ("auto", "hip", "cuda", "cpu")
# Distributions whose versions matter in a bug report (first installed name of each group wins).
LIBRARIES: tuple[tuple[str, ...], ...] = (
    ("numpy",), ("tokenizers",), ("jinja2", "Jinja2"), ("gguf",), ("platformdirs",),
    ("PySide6-Essentials", "PySide6"), ("shiboken6",), ("cuda-python",), ("cuda-bindings",),
    ("hip-python", "rocm-bindings-hip"), ("numba",), ("llvmlite",),
)


# -- system --------------------------------------------------------------------------------------------
def system_info() -> SystemInfo:
    info = SystemInfo(platform=sys.platform, machine=platform.machine(), cpu_count=os.cpu_count(),
                      python=f"{platform.python_implementation()} {platform.python_version()}",
                      python_executable=sys.executable, frozen=bool(getattr(sys, "frozen", False)),
                      app_version=_app_version(), libraries=library_versions())
    info.os, info.os_build = _os_name()
    info.cpu = _cpu_name()
    info.memory_total, info.memory_available = host_memory()
    from engine.model.quant_matrix import describe_kernels
    info.cpu_kernels = describe_kernels()
    return info


def library_versions() -> dict[str, str]:
    out = {}
    for names in LIBRARIES:
        version = "not installed"
        for name in names:
            try:
                version = metadata.version(name)
                break
            except metadata.PackageNotFoundError:
                continue
        out[names[0]] = version
    return out


def _app_version() -> str:
    try:
        return f"{metadata.version('halo-chat')} (engine {__version__})"
    except metadata.PackageNotFoundError:
        return f"{__version__} (source checkout)"


def _os_name() -> tuple[str, str]:
    if sys.platform == "win32":
        release, version, _csd, _ptype = platform.win32_ver()
        edition = platform.win32_edition() if hasattr(platform, "win32_edition") else ""
        build = version.split(".")[-1] if version else ""
        return f"Windows {release} {edition} {version}".replace("  ", " ").strip(), build
    if sys.platform.startswith("linux"):
        pretty = "Linux"
        try:
            os_release = platform.freedesktop_os_release()
            pretty = os_release.get("PRETTY_NAME") or pretty
        except OSError:
            pass
        return pretty, platform.release()
    return f"{platform.system()} {platform.release()}", platform.version()


def _cpu_name() -> str:
    if sys.platform.startswith("linux"):
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
        except OSError:
            pass
    if sys.platform == "win32":
        try:
            import winreg
            key = winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, r"HARDWARE\DESCRIPTION\System\CentralProcessor\0")
            return str(winreg.QueryValueEx(key, "ProcessorNameString")[0]).strip()
        except OSError:
            pass
    return platform.processor() or "unknown"


# -- what the engine would use -------------------------------------------------------------------------
def select_backend(probes: list[ProbeResult], setting: str = "auto") -> tuple[ProbeResult | None, str]:
    """The backend a load would use: the first available one (registry order: HIP, CUDA, CPU) whose api
    matches `setting` ("auto" takes any). Returns (probe or None, why)."""
    if setting not in BACKEND_SETTINGS:
        return None, f"unknown backend setting {setting!r} (expected one of {', '.join(BACKEND_SETTINGS)})"
    wanted = [p for p in probes if setting == "auto" or _api_of(p) == setting]
    for p in wanted:
        if p.available:
            skipped = [q.backend for q in wanted[:wanted.index(p)]]
            why = f"first available backend for the setting '{setting}'"
            return p, why + (f"; not available before it: {', '.join(skipped)}" if skipped else "")
    if not wanted:
        return None, f"no backend matches the setting '{setting}'"
    return None, f"no {setting} backend is available: " + "; ".join(f"{p.backend}: {p.reason}" for p in wanted)


def _api_of(p: ProbeResult) -> str:
    if p.facts is not None:
        return p.facts.api
    from .backends.registry import BACKENDS  # unavailable rows carry no facts: the registry knows the api
    spec = BACKENDS.get(p.backend)
    if spec is None:
        return "hip" if "hip" in p.backend else "cuda" if "cuda" in p.backend else "cpu"
    return spec.api


def async_scheduling_decision(probe_result: ProbeResult | None, setting: bool = True,
                              env: dict | None = None) -> tuple[bool, str]:
    """Whether the engine overlaps steps (async scheduling) on this backend, and why.

    On only where the probe derived async_sampled_token_readback (a safe readback path exists), and
    neither the setting nor HALO_ASYNC_SCHEDULING=0 turns it off. The environment variable can only turn
    it off: no value turns it on where the capability is missing (that is how the original bug shipped)."""
    env = os.environ if env is None else env
    if probe_result is None or not probe_result.available:
        why = probe_result.reason if probe_result is not None else "no backend selected"
        return False, f"no usable backend ({why})"
    caps = probe_result.capabilities
    if caps is None or not caps.async_sampled_token_readback.value:
        why = caps.async_sampled_token_readback.reason if caps else "no capabilities were derived"
        return False, f"{probe_result.backend} has no safe async sampled-token readback: {why}"
    raw = env.get(ASYNC_ENV)
    if raw is not None and raw.strip().lower() in ("0", "false", "no", "off"):
        return False, f"disabled by {ASYNC_ENV}={raw}"
    if not setting:
        return False, "turned off in Settings (async scheduling)"
    return True, (f"{probe_result.backend} implements a safe async sampled-token readback "
                  f"({caps.readback_path}), and neither Settings nor {ASYNC_ENV} turns it off")


# -- the report ----------------------------------------------------------------------------------------
def collect(backend_setting: str = "auto", async_setting: bool = True, self_test: bool = False,
            model_path: str | Path | None = None, probes: list[ProbeResult] | None = None,
            env: dict | None = None) -> DiagnosticsReport:
    """Probe every backend (or use `probes`, e.g. another machine's) and decide what would be used.
    `self_test`: also self-test every available backend, and run the selected one's full self-test."""
    if probes is None:
        from .backends.probe import probe_all
        probes = probe_all(self_test=self_test)
    report = DiagnosticsReport(created=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                               system=system_info(), probes=probes, backend_setting=backend_setting,
                               async_setting=async_setting, descriptions=backend_descriptions())
    apply_selection(report, env)
    if self_test:
        selected = report.selected_backend or backend_setting
        report.self_test = run_self_test(selected, model_path, probe_result=report.probe_for(selected))
    return report


def backend_descriptions() -> dict[str, str]:
    from .backends.registry import BACKENDS
    return {name: spec.description for name, spec in BACKENDS.items()}


def apply_selection(report: DiagnosticsReport, env: dict | None = None) -> DiagnosticsReport:
    """Fill the "in use" fields of `report` from its probes and settings."""
    selected, report.selected_reason = select_backend(report.probes, report.backend_setting)
    report.selected_backend = selected.backend if selected else None
    if selected is not None and selected.capabilities is not None:
        report.readback_path = selected.capabilities.readback_path
        report.readback_reason = selected.capabilities.readback_reason
    else:
        report.readback_path, report.readback_reason = "none", "no backend in use"
    report.async_scheduling, report.async_reason = async_scheduling_decision(selected, report.async_setting, env)
    return report


# -- the self-test ------------------------------------------------------------------------------------
def run_self_test(backend: str, model_path: str | Path | None = None, device: int = 0,
                  probe_result: ProbeResult | None = None) -> SelfTestRun:
    """The "Run self-test" button: the backend's readback self-test through the path its probe selected,
    then (GPU backend and a model given) a GPU-versus-CPU logits comparison. Never raises.
    `probe_result` with a self-test already in it is reused instead of running the readback test again."""
    from .diagnostics_logits import compare_logits

    start = time.perf_counter()
    result = probe_result if probe_result is not None and probe_result.self_test is not None else None
    if result is None:
        from .backends.probe import probe
        from .backends.registry import BACKENDS
        if backend not in BACKENDS:
            readback = SelfTestResult(backend, False, error=f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
            return SelfTestRun(backend, readback, seconds=round(time.perf_counter() - start, 4))
        result = probe(backend, device, self_test=True)
    else:
        start -= result.self_test.seconds    # reused: its time is the readback test's own
    if not result.available or result.self_test is None:
        readback = SelfTestResult(backend, False, error=f"backend unavailable: {result.reason}")
        return SelfTestRun(backend, readback, seconds=round(time.perf_counter() - start, 4))
    logits = None
    if result.facts is not None and result.facts.api != "cpu":
        logits = compare_logits(backend, model_path, device) if model_path else \
            LogitsCheck(None, "no model loaded (load one to compare GPU and CPU logits)")
    elif model_path:
        logits = LogitsCheck(None, "the backend is the CPU, which is the reference itself")
    return SelfTestRun(backend, result.self_test, logits, round(time.perf_counter() - start, 4))


# -- command line -------------------------------------------------------------------------------------
def build_parser(prog: str = "python -m engine.diagnostics") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Halo Chat diagnostics: system, backends, "
                                "capabilities with reasons, readback path and async mode in use")
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of Markdown")
    p.add_argument("--self-test", action="store_true", help="run the readback self-test (and logits check)")
    p.add_argument("--backend", default="auto", choices=BACKEND_SETTINGS, help="the backend setting to evaluate")
    p.add_argument("--no-async", action="store_true", help="evaluate with the async scheduling setting off")
    p.add_argument("--model", help="a .gguf file: the self-test also compares GPU and CPU logits on it")


def run_cli(args) -> int:
    """0 when the selected backend is usable (and, with --self-test, its self-test passed)."""
    report = collect(args.backend, not args.no_async, args.self_test, args.model)
    print(report.to_json() if args.json else to_markdown(report))
    if report.selected_backend is None:
        return 1
    return 0 if report.self_test is None or report.self_test.passed else 1


def main(argv: list[str] | None = None) -> int:
    return run_cli(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
