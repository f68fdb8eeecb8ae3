"""When Qt cannot start a platform plugin the app prints one line saying which packages to install."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.platform_hint import HINT, XCB_PACKAGES

ROOT = Path(__file__).parents[2]


@pytest.mark.gui
def test_a_platform_that_cannot_load_gets_the_hint(tmp_path):
    env = {**os.environ, "QT_QPA_PLATFORM": "no-such-platform", "HALO_DATA_DIR": str(tmp_path / "data"),
           "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "app", "--settings-dir", str(tmp_path / "settings")], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert run.returncode != 0                       # Qt still aborts: there is no window to show
    assert 'Could not find the Qt platform plugin "no-such-platform"' in run.stderr
    assert HINT in run.stderr.splitlines()           # one line, after Qt's own words


def test_the_readme_lists_the_same_packages():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert all(pkg in readme for pkg in XCB_PACKAGES)
    assert ">=3.11,<3.14" in readme and '">=3.11,<3.14"' in (ROOT / "pyproject.toml").read_text()
