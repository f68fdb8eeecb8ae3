"""The installer's logic under wine64 with a dummy payload: install, upgrade in place, silent uninstall
keeping user data, /PURGE removing it (installer/wine_check.sh). Runs only where wine64 is installed
(about 15 s); .ci/run does not install it."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WINE64 = shutil.which("wine64") or ("/usr/lib/wine/wine64" if Path("/usr/lib/wine/wine64").is_file() else None)

pytestmark = [pytest.mark.frozen, pytest.mark.slow,
              pytest.mark.skipif(WINE64 is None, reason="wine64 not installed (apt-get install wine64)"),
              pytest.mark.skipif(shutil.which("makensis") is None, reason="makensis missing: apt-get install nsis")]


def test_install_upgrade_uninstall_under_wine():
    result = subprocess.run([str(ROOT / "installer" / "wine_check.sh")], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    for step in ("another program's _internal is refused", "install 0.1.0", "desktop shortcut", "upgrade 0.1.0 -> 0.2.0",
                 "stays deleted on upgrade", "user data kept", "/PURGE"):
        assert step in result.stdout
    assert "wine check passed" in result.stdout
