"""Writes the other machines' diagnostics reports the tests and screenshots use (run from the repo root:
`PYTHONPATH=. .venv/bin/python tests/unit/data/diagnostics/make_machines.py`).

Each file is a DiagnosticsReport JSON exactly as `python -m engine diagnose --json` writes it. The device
facts are the recorded ones (docs/ORIGIN.md for the seed machine, the H200 run of the backend issue; the
Linux APU is the ROCm APU row of tests/backend/test_policy.py); capabilities are derived from them by the
real policy, never written by hand. Where a fact was not recorded it stays unknown (None / "").
"""
from __future__ import annotations

from pathlib import Path

from engine.backends.facts import DeviceFacts, ProbeResult, SelfTestResult
from engine.backends.policy import derive
from engine.diagnostics import apply_selection, backend_descriptions
from engine.diagnostics_report import DiagnosticsReport, SystemInfo

HERE = Path(__file__).parent
LIBS = {"numpy": "2.2.6", "tokenizers": "0.21.1", "jinja2": "3.1.6", "gguf": "0.17.1", "platformdirs": "4.3.8",
        "PySide6-Essentials": "6.9.1", "shiboken6": "6.9.1", "cuda-python": "not installed",
        "cuda-bindings": "not installed", "hip-python": "not installed"}


def gpu(backend, api, platform, **facts) -> ProbeResult:
    f = DeviceFacts(backend, api, platform, implements_pinned_staging=True, **facts)
    return ProbeResult(backend, True, f"{f.name} ({f.arch}), {api} runtime {f.runtime_version or '?'}, "
                       f"{f.library_path}", f, derive(f), seconds=0.4)


def cpu(platform, total) -> ProbeResult:
    f = DeviceFacts("cpu", "cpu", platform, name="host CPU", arch="numpy", integrated=True,
                    total_memory=total, runtime_version="numpy 2.2.6", implements_pinned_staging=True,
                    device_host_read="not run: host memory", managed_host_read="not run: host memory")
    return ProbeResult("cpu", True, "numpy on the host CPU", f, derive(f), seconds=0.01)


def absent(backend, reason) -> ProbeResult:
    return ProbeResult(backend, False, reason, seconds=0.01)


def report(name, system, probes) -> None:
    r = DiagnosticsReport(created="2026-01-01T00:00:00+00:00", system=system, probes=probes,
                          descriptions=backend_descriptions())
    apply_selection(r, env={})
    (HERE / f"{name}.json").write_text(r.to_json() + "\n", encoding="utf-8")


SEED = gpu("ctypes-hip", "hip", "win32", name="AMD Radeon(TM) 8060S Graphics", arch="gfx1151", integrated=True,
           pageable_memory_access=False, pageable_memory_access_uses_host_page_tables=False, managed_memory=False,
           concurrent_managed_access=False, can_map_host_memory=True, unified_addressing=True,
           library_path=r"C:\Windows\System32\amdhip64_7.dll",
           device_host_read="not run: the attributes already rule it out",
           managed_host_read="not run: the attributes already rule it out")
report("seed-windows-gfx1151", SystemInfo(
    os="Windows 11 (the seed machine of docs/ORIGIN.md)", platform="win32", machine="AMD64",
    cpu="AMD Ryzen AI Max (Strix Halo)", python="CPython 3.12", app_version="0.1.0", libraries=LIBS), [
    absent("hip-python", "hip-python not installed (it publishes Linux wheels only)"),
    SEED,
    absent("cuda-python", "cuda-python not installed"),
    absent("ctypes-cuda", "cuda runtime (cudart64_13*.dll, cudart64_12*.dll) not found in: (PATH entries), "
                          "nor by the system loader"),
    cpu("win32", None)])

APU = gpu("hip-python", "hip", "linux", arch="gfx1151", integrated=True, pageable_memory_access=True,
          pageable_memory_access_uses_host_page_tables=True, managed_memory=True, concurrent_managed_access=True,
          can_map_host_memory=True, unified_addressing=True, library_path="/opt/rocm/lib/libamdhip64.so.7",
          device_host_read="passed", managed_host_read="passed")
report("linux-rocm-apu", SystemInfo(os="Linux with ROCm (an APU with pageable memory access)", platform="linux",
                                    machine="x86_64", libraries=LIBS), [
    APU,
    absent("ctypes-hip", "not recorded for this machine"),
    absent("cuda-python", "cuda-python not installed"),
    absent("ctypes-cuda", "cuda driver (libcuda.so.1) not found"),
    cpu("linux", None)])

H200 = gpu("cuda-python", "cuda", "linux", name="NVIDIA H200", arch="sm_90", integrated=False,
           total_memory=150109880320, pageable_memory_access=False,
           pageable_memory_access_uses_host_page_tables=False, managed_memory=True, concurrent_managed_access=True,
           can_map_host_memory=True, unified_addressing=True, runtime_version="13030", driver_version="13000",
           # managed memory reads back on the host; a plain cudaMalloc allocation (the engine's) segfaults the reader
           device_host_read="failed: the child died with signal 11 SIGSEGV reading a plain device allocation",
           managed_host_read="passed")
H200.self_test = SelfTestResult("cuda-python", True, "pinned D2H copy", steps=500, ids_per_step=8, mismatches=0,
                                step_us_median=43.67)
report("h200", SystemInfo(os="Linux (the NVIDIA H200 test machine)", platform="linux", machine="x86_64",
                          libraries={**LIBS, "cuda-python": "13.3.1"}), [
    absent("hip-python", "hip-python could not open the HIP runtime: libamdhip64.so not found"),
    absent("ctypes-hip", "hip runtime (libamdhip64.so.7, ...) not found"),
    H200,
    absent("ctypes-cuda", "not recorded for this machine"),
    cpu("linux", None)])
print("\n".join(str(p) for p in sorted(HERE.glob("*.json"))))
