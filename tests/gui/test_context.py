"""The context: the setting reaches the engine, the window shows the engine's limit, the memory estimate
equals what the engine allocates, the counter moves as soon as a message is sent."""
from __future__ import annotations

from dataclasses import replace

import pytest
from PySide6.QtCore import Qt

from engine.api import estimate_memory

pytestmark = [pytest.mark.gui, pytest.mark.golden, pytest.mark.qt_log_ignore("This plugin does not support")]


def test_context_setting_reaches_the_engine_and_the_estimate_is_what_it_allocates(make_window, settings, qtbot,
                                                                                   smollm2_path):
    settings.backend = "cpu"
    settings.sampling = replace(settings.sampling, context_length=1024)   # the shared engine has 2048
    window = make_window(engine="own")
    with qtbot.waitSignal(window.client.loaded, timeout=60_000):
        window.models.load_path_now(str(smollm2_path))
    info = window.client.model
    stats = window.client.engine.stats()
    assert info.max_context == stats.max_context == 1024
    assert info.context_length > 1024                # the model could hold more: the setting decided
    assert window.status.context_label.text().endswith("/ 1,024")
    est = estimate_memory(str(smollm2_path), 1024, "cpu")
    assert stats.kv_cache_bytes > 0
    assert est.kv_cache + est.recurrent_state == stats.kv_cache_bytes


def test_context_counter_counts_a_message_as_soon_as_it_is_sent(make_window, qtbot):
    window = make_window()
    label = window.status.context_label
    assert label.text() == "Context: ~0 / 2,048"
    window.composer.edit.setPlainText("Tell me about the sea. " * 20)
    with qtbot.waitSignal(window.chat.streamFinished, timeout=30_000):
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
        sent = label.text()                         # before the engine has answered anything
        assert sent.startswith("Context: ~") and sent != "Context: ~0 / 2,048"
        assert int(sent.split("~")[1].split("/")[0].replace(",", "")) >= 100
    exact = label.text()
    assert "~" not in exact
    assert int(exact.split(":")[1].split("/")[0].replace(",", "")) > 100
