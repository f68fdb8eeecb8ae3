"""Where Halo Chat keeps the user's things. On Windows these land under %LOCALAPPDATA%\\Halo Chat.

Environment overrides exist for tests and portable installs: HALO_DATA_DIR, HALO_MODELS_DIR, HALO_CACHE_DIR.
"""
from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "Halo Chat"


def _dir(env: str, default: Path) -> Path:
    value = os.environ.get(env)
    return Path(value) if value else default


def data_dir() -> Path:
    # appauthor=False keeps Windows paths at %LOCALAPPDATA%\Halo Chat rather than ...\<author>\Halo Chat
    return _dir("HALO_DATA_DIR", Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)))


def models_dir() -> Path:
    return _dir("HALO_MODELS_DIR", data_dir() / "models")


def cache_dir() -> Path:
    return _dir("HALO_CACHE_DIR", Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False)))


def logs_dir() -> Path:
    return data_dir() / "logs"
