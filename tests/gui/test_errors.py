"""What the user reads when something fails: typed engine errors become a title, advice and the right
buttons; sending without a model explains instead of losing the text."""
from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.error_messages import describe
from engine import errors

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]


@pytest.mark.parametrize("error, offers_cpu, words", [
    (errors.InvalidModelError("bad magic", field="magic", offset=0), False, "this file is not a GGUF model"),
    (errors.UnsupportedModelError("architecture 'mamba' is not supported"), False, "mamba"),
    (errors.OutOfDeviceMemoryError("needs 9.1 GB, 4.0 GB free"), True, "9.1 GB"),
    (errors.DeviceLostError("hipErrorLaunchFailure"), True, "conversation is safe"),
    (errors.BackendUnavailableError("amdhip64_7.dll not found"), True, "amdhip64_7.dll"),
    (errors.ContextOverflowError("prompt is 5000 tokens"), False, "context length"),
    (KeyError("boom"), False, "KeyError"),
])
def test_errors_are_described_by_type(error, offers_cpu, words):
    msg = describe(error, "model.gguf")
    assert msg.offer_cpu is offers_cpu
    assert words in msg.body


def test_gpu_failure_banner_offers_cpu_and_diagnostics(qtbot, make_window, tmp_path):
    w = make_window(engine="own")
    w.client.reconfigure("hip", False)
    w.models._on_load_failed(str(tmp_path / "big.gguf"), errors.OutOfDeviceMemoryError("needs 9.1 GB"))
    assert w.banner.isVisible() and w.banner.title.text() == "Not enough GPU memory"
    assert w.banner.action_labels() == ["Continue on CPU", "Diagnostics…"]


def test_sending_without_a_model_explains_and_keeps_the_text(qtbot, make_window):
    w = make_window(engine="own")
    w.composer.edit.setPlainText("hello?")
    qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
    assert w.banner.isVisible()
    assert w.composer.edit.toPlainText() == "hello?"
    assert w.store.messages(w.current_id) == []
