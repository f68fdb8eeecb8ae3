"""Importing the backends loads no driver; errors are classified by the runtime's own names."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.backends.runtime.status import make_error
from engine.errors import BackendUnavailableError, DeviceLostError, OutOfDeviceMemoryError


def test_importing_every_backend_module_loads_no_driver():
    code = ("import sys, importlib; from engine.backends import registry\n"
            "for m in registry.hidden_imports(): importlib.import_module(m)\n"
            "import engine.backends.probe, engine.backends.async_output, engine.backends.selftest\n"
            "maps = open('/proc/self/maps').read()\n"
            "bad = [l for l in ('libamdhip64', 'libcuda.so', 'libcudart', 'libnvrtc', 'libhiprtc') if l in maps]\n"
            "mods = [m for m in ('hip', 'cuda.bindings.runtime', 'PySide6') if m in sys.modules]\n"
            "print(bad, mods)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).parents[2])
    assert out.stdout.strip() == "[] []", out.stdout + out.stderr


@pytest.mark.parametrize("name, cls", [
    ("hipErrorOutOfMemory", OutOfDeviceMemoryError), ("cudaErrorMemoryAllocation", OutOfDeviceMemoryError),
    ("CUDA_ERROR_OUT_OF_MEMORY", OutOfDeviceMemoryError), ("cudaErrorIllegalAddress", DeviceLostError),
    ("hipErrorLaunchFailure", DeviceLostError), ("CUDA_ERROR_LAUNCH_FAILED", DeviceLostError),
    ("hipErrorNoDevice", BackendUnavailableError), ("cudaErrorInsufficientDriver", BackendUnavailableError),
])
def test_errors_are_typed_by_the_runtime_name(name, cls):
    err = make_error("hipMalloc", 2, name, "the runtime's own text")
    assert type(err) is cls and err.error_name == name and "the runtime's own text" in str(err)


def test_probe_never_raises_and_reports_every_backend():
    from engine.backends.probe import probe_all
    results = probe_all(host_read_checks=False)
    assert [r.backend for r in results] == ["hip-python", "ctypes-hip", "cuda-python", "ctypes-cuda", "cpu"]
    for r in results:
        assert r.available or len(r.reason) > 10
    assert results[-1].available and results[-1].capabilities.async_sampled_token_readback.value


def test_diagnose_report_prints_pass_and_fail_lines():
    from engine.backends.__main__ import report
    text, code = report(self_test=True)
    assert "PASS cpu" in text and code == 0
