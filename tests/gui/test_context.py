"""The context: the setting reaches the engine, the window shows the engine's limit, the memory estimate
equals what the engine allocates, the counter moves as soon as a message is sent."""
from __future__ import annotations

from dataclasses import replace

import pytest
from PySide6.QtCore import Qt

from app.library import inspect_model
from engine.api import estimate_memory

pytestmark = [pytest.mark.gui, pytest.mark.golden, pytest.mark.qt_log_ignore("This plugin does not support")]


def test_context_setting_reaches_the_engine_and_the_estimate_is_what_it_allocates(make_window, settings, qtbot,
                                                                                   smollm2_path):
    settings.backend = "cpu"
    settings.sampling = replace(settings.sampling, context_length=512)    # the shared engine has 2048
    settings.kv_cache_type = "f16"                   # asked for, but the CPU keeps (and counts) f32
    window = make_window(engine="own")
    with qtbot.waitSignal(window.client.loaded, timeout=60_000):
        window.models.load_path_now(str(smollm2_path))
    info = window.client.model
    stats = window.client.engine.stats()
    assert info.max_context == stats.max_context == 512
    assert info.context_length > 512                 # the model could hold more: the setting decided
    assert window.status.context_label.text().endswith("/ 512")
    assert info.kv_cache_type == "f32"
    est = estimate_memory(str(smollm2_path), 512, "cpu", kv_cache_type=settings.kv_cache_type)
    assert est == estimate_memory(str(smollm2_path), 512, "cpu", kv_cache_type="f32")
    assert stats.kv_cache_bytes > 0
    assert est.kv_cache + est.recurrent_state == stats.kv_cache_bytes
    # The app's figures are the engine's, for where the model runs (CPU: quantized matrices at their file size,
    # the rest float32 — far below the float32 expansion of every weight).
    entry = inspect_model(smollm2_path)
    assert entry.memory_estimate(512, "cpu", settings.kv_cache_type) == est.total
    assert est.weights < 1.5 * entry.file_size

    # The same small context, overflowed: "drop the oldest turns" answers, with prompt progress on the way.
    _long_chat(window, "drop_oldest", repeat=6)
    seen: list[tuple[int, int, str]] = []

    def record(_cid, message_id, processed, total):
        seen.append((processed, total, window.chat_view.view(message_id).detail_label.text()))

    window.chat.promptProgress.connect(record)
    window.composer.edit.setPlainText("And the lighthouse?")
    with qtbot.waitSignal(window.chat.streamFinished, timeout=60_000) as blocker:
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    fin = blocker.args[2]
    assert fin.reason in ("stop", "length"), fin.error
    assert 256 < fin.usage.prompt_tokens <= 512 - 12            # the newest turns, room for 12 reply tokens
    assert seen and all(0 < p < t == fin.usage.prompt_tokens for p, t, _ in seen)
    assert [p for p, _, _ in seen] == sorted(p for p, _, _ in seen)
    processed, total, shown = seen[-1]
    assert shown == f"Reading the conversation: {processed:,} / {total:,} tokens"
    # The reply says how many earlier turns were left out: all but the newest that fit (each turn ~110 tokens)
    mid = blocker.args[1]
    assert 5 <= fin.turns_left_out < 10
    said = f"{fin.turns_left_out} earlier turns left out"
    assert window.chat_view.view(mid).detail_label.text().endswith(said)
    window.show_conversation(window.current_id)                  # kept with the reply
    assert window.chat_view.view(mid).detail_label.text().endswith(said)


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


def _long_chat(window, policy: str, repeat: int = 25) -> int:
    """Ten earlier turns in the current chat: about 4,000 tokens with repeat=25 (the shared engine holds
    2,048), about 1,100 with repeat=6."""
    from app.settings import Sampling

    cid = window.current_id
    sampling = Sampling.from_dict({"context_overflow": policy}, window.settings.sampling)
    window.store.set_conversation_settings(cid, "You answer briefly.", sampling.to_dict())
    for i in range(10):
        window.store.add_message(cid, "user", f"Question {i}: " + "tell me more about the old harbour town " * repeat)
        reply = window.store.begin_reply(cid)
        window.store.finish_reply(reply.id, "The harbour town has narrow streets and boats. " * repeat)
    window.show_conversation(cid)
    return cid


def test_a_chat_over_the_context_stops_with_a_way_out(make_window, qtbot):
    window = make_window()
    _long_chat(window, "stop")
    window.composer.edit.setPlainText("And the lighthouse?")
    with qtbot.waitSignal(window.chat.streamFinished, timeout=30_000) as blocker:
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    fin = blocker.args[2]
    assert fin.reason == "error" and fin.error_type == "ContextOverflowError"
    assert window.banner.isVisible()
    assert window.banner.title.text() == "This chat no longer fits the context"
    assert "Delete or edit earlier messages" in window.banner.body.text()
    assert window.banner.action_labels() == ["Chat settings…"]      # no "Continue on CPU" on the CPU
