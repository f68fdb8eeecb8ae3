"""The library dialog as the user works it: while the library rescans (Refresh, a folder added, a download done,
a file opened from elsewhere) what they selected stays selected, so Load loads what they picked; and picking
rows, changing settings and loading never read a model file on the GUI thread (a big tokenizer takes a
noticeable part of a second to parse, a file on a hung network drive forever): the scan read what they need."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]


def _library_of_two(qtbot, make_window):
    w = make_window(engine="own")
    w.models.show_library()
    dlg = w.models.library_dialog
    qtbot.waitUntil(lambda: dlg.table.rowCount() == 2, timeout=10_000)
    return w, dlg


def test_a_rescan_keeps_the_users_selection(qtbot, make_window, two_tiny_models):
    models = two_tiny_models
    w, dlg = _library_of_two(qtbot, make_window)
    dlg.select_path(str(models / "beta.gguf"))
    with qtbot.waitSignal(w.library.scanned, timeout=10_000):
        qtbot.mouseClick(dlg.refresh_button, Qt.MouseButton.LeftButton)
    assert dlg.selected_entry().path.name == "beta.gguf"
    with qtbot.waitSignal(dlg.loadRequested) as blocker:
        qtbot.mouseClick(dlg.load_button, Qt.MouseButton.LeftButton)
    assert Path(blocker.args[0]).name == "beta.gguf"


def test_estimates_and_a_load_from_the_library_read_no_file_on_the_gui_thread(qtbot, make_window, settings,
                                                                               two_tiny_models, opens_of):
    settings.backend = "cpu"
    models = two_tiny_models
    w, dlg = _library_of_two(qtbot, make_window)
    opened_by = opens_of(models / "alpha.gguf", models / "beta.gguf")
    dlg.select_path(str(models / "beta.gguf"))
    dlg.select_path(str(models / "alpha.gguf"))
    assert "256 tokens" in dlg.estimate.text()              # the tiny model's trained context, under 2,048
    w.settings.kv_cache_type = "f16"                        # Settings applied: the estimate is shown again
    w.models.target_changed()
    assert "Loading needs about" in dlg.estimate.text()
    with qtbot.waitSignal(w.client.loaded, timeout=60_000):
        qtbot.mouseClick(dlg.load_button, Qt.MouseButton.LeftButton)
    assert opened_by, "the engine opened the model it loaded"
    assert threading.main_thread() not in opened_by
