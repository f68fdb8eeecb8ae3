"""The real HIP runtime with no device (Debian's libamdhip64-5) and hiprtc discovery finding nothing: with
prebuilt objects in the package the HIP backend plans to load them, and Diagnostics says so beside the
runtime's own hipErrorNoDevice (as far as a machine without an AMD GPU can go)."""
from __future__ import annotations

import ctypes.util
import dataclasses

import pytest

from engine.backends.kernels.prebuilt import load_manifest
from engine.backends.runtime import discovery

pytestmark = pytest.mark.skipif(not ctypes.util.find_library("amdhip64"),
                                reason="Debian's libamdhip64-5 is not installed (apt-get install libamdhip64-5)")


def test_no_hiprtc_and_prebuilt_objects_plan_the_objects(monkeypatch):
    manifest = load_manifest()
    if manifest is None:
        pytest.skip("no prebuilt kernels here (python -m engine.backends.kernels.build)")
    nowhere = dataclasses.replace(discovery.HIPRTC, windows=("no-hiprtc.dll",), linux=("libno-hiprtc.so.9",),
                                  wheel_dirs=(), env_vars=(), prefixes=())
    monkeypatch.setattr(discovery, "HIPRTC", nowhere)
    assert discovery.search(discovery.HIPRTC).found is None
    from engine.backends.probe import probe
    from engine.diagnostics import collect
    from engine.diagnostics_report import to_markdown
    r = probe("ctypes-hip", host_read_checks=False)
    assert not r.available and "hipErrorNoDevice" in r.reason
    expected = (f"kernels: prebuilt for {', '.join(manifest.targets())} (code object "
                f"v{manifest.code_object_version}, built with {manifest.compiler})")
    assert r.kernels.startswith(expected) and "gfx1151" in r.kernels
    md = to_markdown(collect(probes=[r]))
    assert expected in md and "hipErrorNoDevice" in md


def test_asking_for_hip_without_a_device_runs_and_reports_the_cpu():
    """The status bar shows ModelInfo.backend: it must say CPU when the CPU runs, with the reason kept."""
    from pathlib import Path

    from engine.engine import Engine

    tiny = Path(__file__).resolve().parents[1] / "golden" / "data" / "tiny-qwen3-q4_k_m.gguf"
    engine = Engine(backend="ctypes-hip", max_context=256)
    try:
        info = engine.load(tiny).result(timeout=120)
        assert info.backend == "cpu"
        assert engine.backend_reason.startswith("CPU fallback: ctypes-hip is not available")
        assert "hipErrorNoDevice" in engine.backend_reason
    finally:
        engine.shutdown()
