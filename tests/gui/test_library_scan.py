"""The library scans off the GUI thread: its result arrives on the GUI thread, and a window closed (the
library deleted) while a scan runs drops the result quietly, with no exception in the scan thread (PySide's
"Signal source has been deleted" when the thread emitted on the deleted library)."""
from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
import shiboken6
from PySide6.QtCore import QObject, QThread
from PySide6.QtWidgets import QApplication

from app.model_manager import ModelLibrary

pytestmark = pytest.mark.gui
TINY = Path(__file__).resolve().parents[1] / "golden" / "data" / "tiny-llama-q4_1.gguf"


@pytest.fixture
def thread_errors(monkeypatch):
    seen: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.exc_value))
    return seen


def _library(tmp_path, gate: threading.Event):
    """A library over a folder with one real GGUF whose scan waits for `gate` (in `extra_files`, which the
    scan thread asks for)."""
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(TINY, folder / TINY.name)
    owner = QObject()
    lib = ModelLibrary(owner, extra_files=lambda: (gate.wait(10), ())[1])
    return owner, lib, str(folder)


def _scan_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "library-scan"]


def test_a_scan_result_arrives_on_the_gui_thread(qtbot, tmp_path, thread_errors):
    gate = threading.Event()
    owner, lib, folder = _library(tmp_path, gate)
    got = []
    lib.scanned.connect(lambda entries: got.append((entries, QThread.currentThread())))
    lib.scan([folder])
    gate.set()
    qtbot.waitUntil(lambda: bool(got), timeout=10_000)
    entries, thread = got[0]
    mine = [e for e in entries if e.path.name == TINY.name]
    assert len(mine) == 1 and mine[0].ok
    assert thread is QApplication.instance().thread() and lib.entries == entries
    assert not thread_errors


def test_a_library_deleted_mid_scan_drops_the_result_without_an_error(qtbot, tmp_path, thread_errors):
    gate = threading.Event()
    owner, lib, folder = _library(tmp_path, gate)
    before = set(_scan_threads())
    lib.scan([folder])
    (scan,) = set(_scan_threads()) - before
    shiboken6.delete(owner)                  # the window closed: its library goes with it
    assert not shiboken6.isValid(lib)
    gate.set()
    scan.join(10)
    assert not scan.is_alive()
    QApplication.processEvents()             # a queued delivery to the deleted library would run here
    assert not thread_errors, thread_errors


def test_an_older_scan_that_ends_last_does_not_replace_a_newer_ones_list(qtbot, tmp_path, thread_errors):
    """Open the library (a scan starts), then add a folder (a second scan): should the first scan end last,
    its list, without the new folder's models, must not replace the second one's."""
    first_scan = threading.Event()
    calls = []

    def extra_files():          # the scan thread asks for these: hold the first scan until the second ends
        calls.append(None)
        if len(calls) == 1:
            first_scan.wait(10)
        return ()

    old, new = tmp_path / "old", tmp_path / "new"
    for folder in (old, new):
        folder.mkdir()
        shutil.copy(TINY, folder / f"{folder.name}-{TINY.name}")
    owner = QObject()
    lib = ModelLibrary(owner, extra_files=extra_files)
    got = []
    lib.scanned.connect(got.append)
    lib.scan([str(old)])
    qtbot.waitUntil(lambda: len(calls) == 1, timeout=10_000)
    lib.scan([str(old), str(new)])
    qtbot.waitUntil(lambda: len(got) == 1, timeout=10_000)
    first_scan.set()
    for scan in _scan_threads():
        scan.join(10)
    QApplication.processEvents()             # the first scan's result, if delivered, lands here
    names = {e.path.name for e in lib.entries}
    assert f"new-{TINY.name}" in names, names
    assert all(f"new-{TINY.name}" in {e.path.name for e in entries} for entries in got)
    assert not thread_errors
