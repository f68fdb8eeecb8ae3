"""numba's kernel cache in a frozen app (PyInstaller): under the app's cache folder, one for any working directory.

A bundle keeps each module's file name relative (engine/model/quant_kernels.py) and has no source file, so numba's own
locators fell back to its user-wide folder keyed by the absolute form of that name: a new cache per working
directory, outside what the uninstaller purges. The frozen module is reproduced here as PyInstaller makes it
(sys.frozen, a relative code file name); tests/frozen checks the real bundle."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")
ROOT = Path(__file__).resolve().parents[2]
FROZEN_MODULE = """
import os, sys, types
sys.frozen = True
os.environ["NUMBA_CACHE_DIR"] = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from engine.model.numba_cache import keep_frozen_cache_in_cache_dir
assert keep_frozen_cache_in_cache_dir()
code = compile("from numba import njit\\n@njit(cache=True)\\ndef add_one(x):\\n    return x + 1\\n",
               os.path.join("engine", "model", "quant_kernels.py"), "exec")
module = types.ModuleType("engine.model.quant_kernels")
exec(code, module.__dict__)
assert module.add_one(1) == 2
print(module.add_one._cache._cache_path)
"""


def test_a_frozen_apps_kernels_are_cached_in_its_folder_from_any_working_directory(tmp_path):
    cache = tmp_path / "cache"
    paths = []
    for cwd in (tmp_path, ROOT.parent):
        done = subprocess.run([sys.executable, "-c", FROZEN_MODULE, str(cache), str(ROOT)], cwd=cwd,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        paths.append(done.stdout.strip())
    assert paths[0] == paths[1] and Path(paths[0]).parent == cache
    assert len(list(Path(paths[0]).glob("*.nbi"))) == 1          # both starts keep one index
