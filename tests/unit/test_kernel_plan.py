"""Where each backend's kernels come from (engine.backends.kernel_plan): prebuilt object by the device's
gcnArchName, hiprtc/NVRTC as fallback, or the reason and what to install. Pure: manifests are written to
temp folders."""
from __future__ import annotations

import json

from engine.backends import kernels
from engine.backends.kernel_plan import NONE, PREBUILT, RUNTIME, plan, prebuilt_object
from engine.backends.kernels.prebuilt import base_arch, load_manifest, source_sha256


def write_manifest(root, targets=("gfx1151", "gfx1100")):
    objects = []
    for t in targets:
        for f in kernels.kernel_files():
            path = root / t / f.replace(".cu", ".hsaco")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"\x7fELF" + t.encode())
            objects.append({"target": t, "kernel_set": f, "path": f"{t}/{path.name}", "object_sha256": "-",
                            "source_sha256": source_sha256(f), "kernels": ["k"]})
    (root / "manifest.json").write_text(json.dumps({"code_object_version": 5, "compiler": "clang 19.1.7",
                                                    "options": [], "objects": objects}))
    return load_manifest(root)


def test_base_arch_strips_feature_suffixes():
    assert base_arch("gfx1151:xnack-") == "gfx1151"
    assert base_arch("gfx90a:sramecc+:xnack-") == "gfx90a"
    assert base_arch("gfx1100") == "gfx1100"


def test_hip_prefers_the_prebuilt_object_even_when_hiprtc_is_present(tmp_path):
    m = write_manifest(tmp_path)
    p = plan("hip", "gfx1151:xnack-", m, "hiprtc 6.4")
    assert p.how == PREBUILT
    assert p.line == "kernels: prebuilt for gfx1151 (code object v5, built with clang 19.1.7)"
    obj = prebuilt_object("hip", "gfx1151:xnack-", "halo_quant.cu", m)
    assert obj.read() == b"\x7fELFgfx1151" and obj.current()


def test_hiprtc_absent_is_no_error_when_an_object_exists(tmp_path):
    m = write_manifest(tmp_path)
    assert plan("hip", "gfx1100", m, None, "hiprtc (hiprtc*.dll) not found").how == PREBUILT
    # no device to ask yet: every shipped target is named
    none_yet = plan("hip", None, m, None, "not found")
    assert none_yet.how == PREBUILT and "gfx1100, gfx1151" in none_yet.line


def test_other_archs_fall_back_to_hiprtc_then_say_what_to_install(tmp_path):
    m = write_manifest(tmp_path)
    assert plan("hip", "gfx942", m, "hiprtc 6.4").line == "kernels: compiled at run time by hiprtc 6.4"
    assert prebuilt_object("hip", "gfx942", "halo_quant.cu", m) is None
    p = plan("hip", "gfx942", m, None, "hiprtc (hiprtc07??.dll) not found in: C:\\Windows\\System32")
    assert p.how == NONE
    assert "none for gfx942" in p.line and "gfx1100, gfx1151 only" in p.line
    assert "hiprtc07??.dll) not found in: C:\\Windows\\System32" in p.line and "HIP SDK" in p.line
    assert "no prebuilt objects in this build" in plan("hip", "gfx1151", None, None, "x").line


def test_cuda_keeps_nvrtc_and_never_takes_a_hip_object(tmp_path):
    m = write_manifest(tmp_path)
    assert plan("cuda", "sm_90", m, "nvrtc 13.0").how == RUNTIME
    assert prebuilt_object("cuda", "gfx1151", "halo_quant.cu", m) is None
    assert "nvidia-cuda-nvrtc" in plan("cuda", "sm_90", None, None, "libnvrtc.so.13 not found").line


def test_a_missing_or_broken_manifest_is_no_manifest(tmp_path):
    assert load_manifest(tmp_path) is None
    (tmp_path / "manifest.json").write_text("{not json")
    assert load_manifest(tmp_path) is None
