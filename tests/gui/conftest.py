"""GUI fixtures: every test gets its own history file and settings folder; windows share one real Engine
with the starter model loaded once per session (loading takes seconds; generating a few greedy tokens
does not)."""
from __future__ import annotations

import os
import shutil
import sys
import threading
from pathlib import Path

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from app.engine_client import EngineClient
from app.settings import AppSettings, Sampling, use_settings_dir
from app.store import Store
from app.theme import apply_theme
from engine.paths import models_dir

# Greedy and short: deterministic replies that take well under a second on the CPU.
# Captured before any test overrides HALO_DATA_DIR (models_dir() derives from it): where the real models are.
REAL_MODELS_DIR = str(models_dir())
FAST = Sampling(temperature=0.0, top_p=1.0, top_k=0, max_tokens=12, context_length=2048, seed=0)
LONG = Sampling(temperature=0.0, top_p=1.0, top_k=0, max_tokens=400, context_length=2048, seed=0)


@pytest.fixture(autouse=True)
def isolated_user_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HALO_MODELS_DIR", os.environ.get("HALO_MODELS_DIR", REAL_MODELS_DIR))
    monkeypatch.delenv("HALO_SETTINGS_DIR", raising=False)
    use_settings_dir(tmp_path / "settings")
    return tmp_path


@pytest.fixture(scope="session")
def shared_engine(smollm2_path):
    from engine.engine import Engine

    engine = Engine(max_context=2048)
    engine.load(smollm2_path).result(timeout=120)
    yield engine
    engine.shutdown()


@pytest.fixture
def settings(isolated_user_dirs) -> AppSettings:
    s = AppSettings()
    s.sampling = FAST
    s.theme = "light"
    return s


@pytest.fixture
def db_path(isolated_user_dirs):
    return isolated_user_dirs / "data" / "history.sqlite3"


@pytest.fixture
def make_window(request, qtbot, settings, db_path):
    """make_window(engine=shared_engine) -> a shown MainWindow over this test's history file."""
    from app.main_window import MainWindow

    windows = []

    def make(engine="shared", path=None):
        """engine="shared": talk to the session's loaded engine; "own": the window makes its own."""
        apply_theme(QApplication.instance(), settings.theme)
        # The shared engine (and so the real model) is only needed by tests that generate.
        client = EngineClient(engine=request.getfixturevalue("shared_engine")) if engine == "shared" else None
        window = MainWindow(Store(path or db_path), settings, client)
        qtbot.addWidget(window)
        window.show()
        window.activateWindow()   # window shortcuts (Ctrl+N, Ctrl+R...) only fire in the active window
        qtbot.waitUntil(window.isActiveWindow, timeout=2_000)
        windows.append(window)
        return window

    yield make
    for w in windows:
        w.close()
        w.store.close()


def send(qtbot, window, text: str, timeout: int = 30_000):
    """Types `text` and presses Enter; returns when the reply has finished."""
    from PySide6.QtCore import Qt

    window.composer.edit.setPlainText(text)
    with qtbot.waitSignal(window.chat.streamFinished, timeout=timeout) as blocker:
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    return blocker.args   # conversation id, message id, Finished


_WATCHED: set[str] = set()                          # files whose opens are recorded, with the opening thread
_OPENED_BY: list[threading.Thread] = []


def _record_opens(event: str, args: tuple) -> None:
    """Python's audit hook (it cannot be removed, so it does nothing unless a test watches a file)."""
    if event == "open" and _WATCHED and str(args[0]) in _WATCHED:
        _OPENED_BY.append(threading.current_thread())


sys.addaudithook(_record_opens)


@pytest.fixture
def opens_of():
    """opens_of(*paths) -> the list of threads that open those files from now on (for "not on the GUI thread")."""
    def watch(*paths) -> list[threading.Thread]:
        _WATCHED.update(map(str, paths))
        return _OPENED_BY

    yield watch
    _WATCHED.clear()
    _OPENED_BY.clear()


TINY_MODEL = Path(__file__).resolve().parents[1] / "golden" / "data" / "tiny-llama-q4_1.gguf"


@pytest.fixture
def two_tiny_models(tmp_path, monkeypatch) -> Path:
    """The models folder (HALO_MODELS_DIR) holding two copies of the tiny model: alpha.gguf and beta.gguf."""
    folder = tmp_path / "models"
    folder.mkdir()
    for name in ("alpha.gguf", "beta.gguf"):
        shutil.copy(TINY_MODEL, folder / name)
    monkeypatch.setenv("HALO_MODELS_DIR", str(folder))
    return folder


def when_modal_shown(kind, answer) -> None:
    """Calls answer(dialog) once a modal dialog of class `kind` is open: a modal runs its own event loop, so the
    test answers it from a timer started before the call that opens it."""
    def poll():
        dialog = QApplication.activeModalWidget()
        if not isinstance(dialog, kind):
            QTimer.singleShot(20, poll)
            return
        answer(dialog)
    QTimer.singleShot(0, poll)
