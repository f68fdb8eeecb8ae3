"""The Linux bundle, built once per session: its contents, and its --self-test on the starter model."""
from __future__ import annotations

import os
import re
import subprocess

import pytest

from engine.backends import registry
from installer import bundle_contents

pytestmark = [pytest.mark.frozen, pytest.mark.slow]


def test_bundle_carries_kernels_assets_and_version(frozen_bundle):
    internal = frozen_bundle.folder / "_internal"
    for cu in (bundle_contents.ROOT / "engine" / "backends" / "kernels").glob("*.cu"):
        assert (internal / "engine" / "backends" / "kernels" / cu.name).is_file(), cu.name
    for qss in ("base.qss", "light.qss", "dark.qss"):
        assert (internal / "assets" / "styles" / qss).is_file()
    assert (internal / "assets" / "icons" / "halo.ico").is_file()
    assert (internal / "VERSION.txt").read_text().strip() == bundle_contents.version()


def test_bundle_carries_one_prebuilt_object_per_target_and_kernel_set(frozen_bundle):
    """The objects a Windows driver without hiprtc needs, with the manifest the runtime picks them by."""
    from engine.backends.kernels import kernel_files
    from engine.backends.kernels.prebuilt import TARGETS, load_manifest

    if load_manifest() is None and os.environ.get("HALO_REQUIRE_PREBUILT") != "1":
        pytest.skip("no prebuilt kernels here (python -m engine.backends.kernels.build)")
    bundled = load_manifest(frozen_bundle.folder / "_internal" / "engine" / "backends" / "kernels" / "prebuilt")
    assert bundled is not None, "the bundle has no prebuilt/manifest.json"
    assert sorted((o.target, o.kernel_set) for o in bundled.objects) == \
        sorted((t, f) for t in TARGETS for f in kernel_files())
    for o in bundled.objects:
        assert o.path.is_file() and o.read()[:4] == b"\x7fELF", o.path
        assert o.current(), f"{o.path} is older than {o.kernel_set}"


def test_bundle_leaves_out_test_tools_and_torch(frozen_bundle):
    names = {p.name for p in (frozen_bundle.folder / "_internal").iterdir()}
    assert not names & {"torch", "pytest", "_pytest", "hypothesis", "pytestqt", "PyInstaller", "tests"}


@pytest.mark.golden
def test_self_test_passes_on_the_starter_model(frozen_bundle, smollm2_path, user_dirs):
    tmp, env = user_dirs
    report = tmp / "report.txt"
    result = subprocess.run([str(frozen_bundle.executable), "--self-test", "--model", str(smollm2_path),
                             "--report", str(report)], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    text = report.read_text()
    assert text == result.stdout
    assert "frozen" in text and "ALL PASSED" in text
    assert "PASS  generate " in text and "tokens (length)" in text
    # A binding that is installed here but missing from the bundle shows up as "No module named 'x'"
    # in a backend's reason; one that is not installed here cannot be bundled and is reported the same way.
    for name in re.findall(r"No module named '([\w.]+)'", text + result.stderr):
        assert not bundle_contents.installed(name), f"{name} is installed here but missing from the bundle"
    assert "PASS  diagnostics" in text
    assert "numba" in text and "quantized kernels" in text      # the CPU path's compiled kernels run frozen too
    # ... and are cached in the app's cache folder (HALO_CACHE_DIR here), not numba's user-wide one
    assert list((tmp / "cache" / "numba").rglob("quant_kernels.*.nbi")), "no kernel cache in the app's folder"
    for backend in registry.BACKENDS:             # every registry backend was bundled and probed
        assert f"### {backend}: " in text
    crash_log = tmp / "data" / "logs" / "crash.log"
    assert "faulthandler armed (all threads)" in crash_log.read_text()


def test_self_test_fails_without_a_model(frozen_bundle, user_dirs, tmp_path):
    _, env = user_dirs
    result = subprocess.run([str(frozen_bundle.executable), "--self-test", "--model", str(tmp_path / "none.gguf")],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert "FAIL  model" in result.stdout and "FAILED: model" in result.stdout


def test_the_frozen_entry_runs_the_engines_child_modules(frozen_bundle):
    """The engine starts children as `sys.executable -m MODULE`; in the bundle that is this program."""
    import json

    request = json.dumps({"op": "render", "source": "{{ messages[0].content }}!", "max_chars": 1000,
                          "time_limit": 5, "context": {"messages": [{"role": "user", "content": "yo"}]}})
    result = subprocess.run([str(frozen_bundle.executable), "-m", "engine.template_worker", str(512 << 20)],
                            input=request + "\n", capture_output=True, text=True, timeout=120)
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert answers == [{"ready": True}, {"ok": True, "text": "yo!"}], result.stderr
    result = subprocess.run([str(frozen_bundle.executable), "-m", "engine.backends.host_read_check", "cpu", "device"],
                            capture_output=True, text=True, timeout=120)
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer == {"ok": False, "detail": "ValueError: cpu has no runtime binding"}
    refused = subprocess.run([str(frozen_bundle.executable), "-m", "os"], capture_output=True, text=True,
                             timeout=120)
    assert refused.returncode == 2
