"""Models the way a user handles them: drop a file (it joins the library), switch and cancel (the old model
stays and answers), start again after the file went away (the window says why), a file that is not a model
(said in words)."""
from __future__ import annotations

import argparse

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent

from app.__main__ import start_model
from tests.gui.conftest import send

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]


def _drop(window, path) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    window.dropEvent(QDropEvent(QPointF(20, 20), Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton,
                                Qt.KeyboardModifier.NoModifier))


@pytest.mark.golden
def test_drop_switch_cancel_and_a_missing_model_at_the_next_start(make_window, settings, qtbot, smollm2_path,
                                                                   tmp_path):
    settings.backend = "cpu"
    elsewhere = tmp_path / "downloads" / "my-model.gguf"          # outside every library folder
    elsewhere.parent.mkdir()
    elsewhere.symlink_to(smollm2_path)
    window = make_window(engine="own")
    with qtbot.waitSignal(window.client.loaded, timeout=60_000):
        _drop(window, elsewhere)
    assert settings.model_files == [str(elsewhere)]
    qtbot.waitUntil(lambda: window.library.entry(str(elsewhere)) is not None, timeout=10_000)
    assert window.library.entry(str(elsewhere)).ok

    # Switch to another load and cancel it while it runs: the model we had stays loaded and answers. The
    # cancel goes in the same turn of the event loop as the load: the CPU maps quantized weights instead of
    # decoding them, so this load is over in a fraction of a second, often before its first progress event.
    with qtbot.waitSignal(window.client.loadCancelled, timeout=60_000):
        window.models.load_path_now(str(smollm2_path))
        assert window.load_bar.isVisible()                       # what the user clicks is there
        window.load_bar.cancelRequested.emit()
    assert window.client.model is not None and window.client.model.path == str(elsewhere)
    assert window.client.engine.stats().model_loaded
    assert window.model_button.text().startswith(window.client.model.name)
    _cid, _mid, fin = send(qtbot, window, "Hello!")
    assert fin.reason in ("stop", "length")

    # Next start: the file is gone. The window says which model and why, instead of "No model".
    elsewhere.unlink()
    window.close()
    again = make_window(engine="own")
    with qtbot.waitSignal(again.library.scanned, timeout=10_000):
        start_model(again, argparse.Namespace(model=None, starter=False))
    assert again.banner.isVisible()
    assert again.banner.title.text() == "The model you used last time cannot be loaded"
    assert "my-model.gguf" in again.banner.body.text() and "cannot read the file" in again.banner.body.text()
    assert again.client.model is None


def test_a_file_that_is_not_a_model_is_said_in_words(make_window, qtbot, tmp_path):
    fake = tmp_path / "notes.gguf"
    fake.write_text("This is a shopping list, not a model.\n" * 4)
    window = make_window(engine="own")
    _drop(window, fake)
    qtbot.waitUntil(window.banner.isVisible, timeout=10_000)
    body = window.banner.body.text()
    assert "this file is not a GGUF model" in body and "magic" not in body and "b'This" not in body
    assert window.client.model is None


@pytest.mark.golden
def test_unload_while_another_model_loads_leaves_no_model(make_window, settings, qtbot, smollm2_path, gemma_path):
    """File → Unload model while a switch to another model is under way: the engine unloads after that load,
    so the window must not then name the new model as loaded (sending would fail with "no model")."""
    settings.backend = "cpu"
    window = make_window(engine="own")
    with qtbot.waitSignal(window.client.loaded, timeout=60_000):
        window.models.load_path_now(str(smollm2_path))
    window.models.load_path_now(str(gemma_path))
    assert window.load_bar.isVisible()
    window.models.unload()
    assert not window.client.engine.stats().model_loaded     # answered after the load and the unload
    qtbot.waitUntil(lambda: not window.client.is_loading, timeout=10_000)
    assert window.client.model is None
    assert not window.load_bar.isVisible()
    assert window.model_button.text().startswith("Load a model")


@pytest.mark.golden
def test_escape_cancels_a_load_and_the_button_says_so(make_window, settings, qtbot, gemma_path):
    """Esc stops what is running: a reply (tests/gui/test_chat.py) and, as the load bar's Cancel, a load."""
    settings.backend = "cpu"
    window = make_window(engine="own")
    window.composer.edit.setFocus()
    with qtbot.waitSignal(window.client.loadCancelled, timeout=30_000):
        window.models.load_path_now(str(gemma_path))        # cancelled in the same turn, as above
        assert window.load_bar.isVisible()
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Escape)
    assert not window.load_bar.isVisible() and window.client.model is None
    assert "Esc" in window.load_bar.cancel_button.text()
