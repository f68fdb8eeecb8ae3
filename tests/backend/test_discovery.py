"""Library discovery on fake folder trees (Windows naming included: no Windows here), and the real
no-device HIP path through Debian's libamdhip64.so.5 (installed by .ci/run)."""
from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.backends.runtime import discovery
from engine.backends.runtime.discovery import CUDA_RUNTIME, HIP_RUNTIME, HIPRTC, NVRTC, search


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_windows_newest_hip_name_wins_over_an_earlier_folder(tmp_path):
    site = tmp_path / "site-packages"
    touch(site / "_rocm_sdk_core" / "bin" / "amdhip64_6.dll")
    touch(tmp_path / "HIP" / "bin" / "amdhip64_7.dll")
    found = search(HIP_RUNTIME, "win32", {"HIP_PATH": str(tmp_path / "HIP")}, [str(site)])
    # filename-major: amdhip64_7.dll under HIP_PATH beats amdhip64_6.dll in the earlier wheel folder
    assert found.found == str(tmp_path / "HIP" / "bin" / "amdhip64_7.dll")
    assert found.folders.index(str(site / "_rocm_sdk_core" / "bin")) < found.folders.index(str(tmp_path / "HIP" / "bin"))


def test_windows_hip_order_system32_then_PATH_then_wheel_then_sdk_last(tmp_path):
    """The display driver's runtime (System32, no HIP SDK) first; the SDK's HIP_PATH\\bin last."""
    site, hip, rocm, windir, on_path = (tmp_path / n for n in ("site", "hip", "rocm", "Windows", "tools"))
    env = {"HIP_PATH": str(hip), "ROCM_PATH": str(rocm), "SystemRoot": str(windir),
           "PATH": os.pathsep.join([str(on_path), ""])}
    s = search(HIP_RUNTIME, "win32", env, [str(site)])
    assert s.folders == [str(windir / "System32"), str(on_path), str(site / "_rocm_sdk_core" / "bin"),
                         str(hip / "bin"), str(rocm / "bin")]
    assert s.found is None
    touch(hip / "bin" / "amdhip64_6.dll")
    assert search(HIP_RUNTIME, "win32", env, [str(site)]).found == str(hip / "bin" / "amdhip64_6.dll")
    touch(on_path / "amdhip64_6.dll")
    assert search(HIP_RUNTIME, "win32", env, [str(site)]).found == str(on_path / "amdhip64_6.dll")
    touch(windir / "System32" / "amdhip64_6.dll")
    assert search(HIP_RUNTIME, "win32", env, [str(site)]).found == str(windir / "System32" / "amdhip64_6.dll")
    touch(hip / "bin" / "amdhip64_7.dll")          # amdhip64_7 anywhere beats amdhip64_6 anywhere
    assert search(HIP_RUNTIME, "win32", env, [str(site)]).found == str(hip / "bin" / "amdhip64_7.dll")
    touch(windir / "System32" / "amdhip64_7.dll")
    assert search(HIP_RUNTIME, "win32", env, [str(site)]).found == str(windir / "System32" / "amdhip64_7.dll")


def test_windows_hiprtc_is_looked_up_apart_and_may_be_missing(tmp_path):
    windir = tmp_path / "Windows"
    touch(windir / "System32" / "amdhip64_7.dll")                 # a stock Adrenalin driver: no hiprtc
    env = {"SystemRoot": str(windir), "PATH": ""}
    assert search(HIP_RUNTIME, "win32", env, []).found.endswith("amdhip64_7.dll")
    missing = search(HIPRTC, "win32", env, [])
    assert missing.found is None and str(windir / "System32") in missing.not_found_reason()


def test_windows_cuda_keeps_its_order(tmp_path):
    cuda, on_path = tmp_path / "CUDA", tmp_path / "tools"
    s = search(CUDA_RUNTIME, "win32", {"CUDA_PATH": str(cuda), "PATH": str(on_path)}, [])
    assert s.folders == [str(cuda / "bin"), str(on_path)]


def test_windows_hiprtc_carries_the_hip_version_and_skips_builtins(tmp_path):
    core = tmp_path / "site" / "_rocm_sdk_core" / "bin"
    touch(core / "hiprtc-builtins0701.dll")
    touch(core / "hiprtc0605.dll")
    touch(core / "hiprtc0701.dll")
    assert search(HIPRTC, "win32", {}, [str(tmp_path / "site")]).found == str(core / "hiprtc0701.dll")


def test_windows_cuda_names(tmp_path):
    cuda = tmp_path / "CUDA" / "v13.0"
    touch(cuda / "bin" / "cudart64_13.dll")
    touch(cuda / "bin" / "nvrtc64_130_0.dll")
    env = {"CUDA_PATH": str(cuda)}
    assert search(CUDA_RUNTIME, "win32", env, []).found.endswith("cudart64_13.dll")
    assert search(NVRTC, "win32", env, []).found.endswith("nvrtc64_130_0.dll")


def test_linux_versioned_sonames_first(tmp_path):
    rocm = tmp_path / "rocm"
    touch(rocm / "lib" / "libamdhip64.so")
    touch(rocm / "lib" / "libamdhip64.so.6")
    assert search(HIP_RUNTIME, "linux", {"ROCM_PATH": str(rocm)}, []).found == str(rocm / "lib" / "libamdhip64.so.6")


def test_not_found_reason_lists_every_folder(tmp_path):
    s = search(HIP_RUNTIME, "win32", {"HIP_PATH": str(tmp_path / "nowhere")}, [str(tmp_path / "site")])
    assert s.found is None
    reason = s.not_found_reason()
    assert "_rocm_sdk_core" in reason and "nowhere" in reason and "hip runtime" in reason


def test_path_from_maps_reports_the_real_file(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 00000000 08:01 1234  /usr/lib/x86_64-linux-gnu/libamdhip64.so.5.2.21153\n")
    assert discovery.path_from_maps(maps, "libamdhip64.so.5") == "/usr/lib/x86_64-linux-gnu/libamdhip64.so.5.2.21153"


needs_hip5 = pytest.mark.skipif(not ctypes.util.find_library("amdhip64"),
                                reason="Debian's libamdhip64-5 is not installed (apt-get install libamdhip64-5)")


@needs_hip5
def test_real_hip_runtime_without_a_device_through_ctypes():
    from engine.backends.probe import probe
    r = probe("ctypes-hip")
    assert not r.available
    assert "hipErrorNoDevice" in r.reason and "libamdhip64.so.5" in r.reason
    assert r.facts is None or r.facts.library_path


@needs_hip5
def test_real_hip_runtime_without_a_device_through_hip_python(tmp_path):
    pytest.importorskip("hip", reason="hip-python not installed")
    # hip-python opens $ROCM_PATH/lib/libamdhip64.so (unversioned); point it at Debian's HIP 5 runtime.
    lib = tmp_path / "rocm" / "lib"
    lib.mkdir(parents=True)
    real = discovery.open_library(HIP_RUNTIME).path
    (lib / "libamdhip64.so").symlink_to(real)
    code = ("from engine.backends.probe import probe; r = probe('hip-python'); "
            "print(r.available, '|', r.reason)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "ROCM_PATH": str(tmp_path / "rocm")}, cwd=Path(__file__).parents[2])
    assert out.stdout.startswith("False |") and "hipErrorNoDevice" in out.stdout, out.stderr[-800:]
