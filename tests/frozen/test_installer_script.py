"""The NSIS script compiles (makensis, warnings are errors) around the frozen bundle and a small payload.
On Linux this checks the script, not a Windows installer (PyInstaller cannot cross-build)."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from installer import build

pytestmark = [pytest.mark.frozen,
              pytest.mark.skipif(shutil.which("makensis") is None, reason="makensis missing: apt-get install nsis")]


def _payload(tmp_path):
    folder = tmp_path / "payload"
    (folder / "_internal").mkdir(parents=True)
    (folder / "HaloChat.exe").write_bytes(b"MZ not really")
    (folder / "_internal" / "library.dll").write_bytes(b"\0" * 1024)
    return folder


def test_script_compiles_around_a_payload(tmp_path):
    setup = build.build_installer(_payload(tmp_path), tmp_path / build.installer_name("1.2.3"), version="1.2.3")
    data = setup.read_bytes()
    assert data[:2] == b"MZ"
    assert "Halo Chat".encode("utf-16-le") in data            # the version resource's product name


def test_script_refuses_to_compile_without_its_defines(tmp_path):
    result = subprocess.run([build.find_makensis(), "-V2", str(build.NSIS_SCRIPT)], capture_output=True,
                            text=True, cwd=build.NSIS_SCRIPT.parent)
    assert result.returncode != 0
    assert "define VERSION, BUNDLE_DIR, OUTFILE and ICON" in result.stdout + result.stderr


@pytest.mark.slow
def test_script_compiles_around_the_frozen_bundle(frozen_bundle, tmp_path):
    setup = build.build_installer(frozen_bundle.folder, tmp_path / build.installer_name("0"), check_only=True)
    assert setup.read_bytes()[:2] == b"MZ"
    assert setup.stat().st_size > 0.9 * frozen_bundle.size_bytes   # the whole bundle is inside (stored)
