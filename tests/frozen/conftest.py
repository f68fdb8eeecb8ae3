"""The frozen app: one PyInstaller build of the Linux bundle per test session.

HALO_FROZEN_BUNDLE=<folder> reuses an already built bundle (local iteration: a build takes minutes on
two cores); CI always builds.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def frozen_bundle(tmp_path_factory):
    pytest.importorskip("PyInstaller", reason="PyInstaller is in the dev extras: pip install -e '.[dev]'")
    from installer import build

    prebuilt = os.environ.get("HALO_FROZEN_BUNDLE")
    if prebuilt:
        bundle = build.Bundle.measure(Path(prebuilt))
        assert bundle.executable.is_file(), f"HALO_FROZEN_BUNDLE={prebuilt} holds no {bundle.executable.name}"
        return bundle
    base = tmp_path_factory.mktemp("frozen")
    bundle = build.build_bundle(base / "dist", base / "work")
    print(f"\n{bundle.summary()}")
    return bundle


@pytest.fixture
def user_dirs(tmp_path, monkeypatch):
    """A fresh data folder for the frozen app (logs, history); the real models folder stays visible."""
    from engine import paths

    env = dict(os.environ, HALO_DATA_DIR=str(tmp_path / "data"), HALO_MODELS_DIR=str(paths.models_dir()),
               HALO_CACHE_DIR=str(tmp_path / "cache"), QT_QPA_PLATFORM="offscreen")
    env.pop("NUMBA_CACHE_DIR", None)       # this process's (engine.model.quant_kernels set it): the app sets its own
    return tmp_path, env
