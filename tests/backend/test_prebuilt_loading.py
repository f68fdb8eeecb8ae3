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


def test_the_hip_backend_hands_the_gfx1151_object_to_hipModuleLoadData(monkeypatch):
    """The real ctypes HIP binding over Debian's runtime, told only what this machine lacks (one gfx1151
    device) and with hiprtc absent as on a stock Windows driver: GpuBackend.kernel passes the prebuilt
    object's bytes to the real hipModuleLoadData, which refuses for want of a device (Debian's HIP 5.2 says
    hipErrorInvalidDevice there; the device count already said hipErrorNoDevice)."""
    from engine.backends.gpu import GpuBackend
    from engine.backends.runtime.ctypes_runtime import CtypesRuntime
    from engine.errors import BackendError

    manifest = load_manifest()
    if manifest is None:
        pytest.skip("no prebuilt kernels here (python -m engine.backends.kernels.build)")

    class OneStrixHaloDevice(CtypesRuntime):
        loaded: list[bytes] = []

        def device_count(self) -> int:
            return 1

        def set_device(self, device: int) -> None:
            pass

        def device_arch(self, device: int) -> str:
            return "gfx1151:xnack-"

        def module_load(self, code: bytes):
            self.loaded.append(code)
            return super().module_load(code)

    rt = OneStrixHaloDevice("hip")
    rt.load()
    rt._rtc, rt._rtc_error = None, "hiprtc not found"      # the state load() leaves on a driver without hiprtc
    backend = GpuBackend(rt, load=False)
    with pytest.raises(BackendError, match="hipModuleLoadData failed: hipError(NoDevice|InvalidDevice)"):
        backend.kernel("selftest.cu", "halo_write_ids")
    assert rt.loaded == [manifest.find("gfx1151", "selftest.cu").read()]
    assert not backend.advisories            # refused for want of a device, not retried through a compiler
