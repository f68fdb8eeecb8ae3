"""Chatting through the real widgets with the real engine on the starter model."""
from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from tests.gui.conftest import LONG, send

pytestmark = [pytest.mark.gui, pytest.mark.golden, pytest.mark.qt_log_ignore("This plugin does not support")]


def _use(window, sampling):
    window.store.set_conversation_settings(window.current_id, "", sampling.to_dict())


def test_send_shows_a_streamed_reply_and_saves_both_messages(qtbot, make_window, shared_engine):
    w = make_window()
    updates = []
    w.chat.streamUpdated.connect(lambda cid, mid, text: updates.append(text))
    _use(w, LONG.__class__(**{**LONG.to_dict(), "max_tokens": 40}))
    _cid, mid, fin = send(qtbot, w, "Write one sentence about the sea.")
    assert fin.reason in ("stop", "length")
    assert len(updates) >= 2, "the reply should arrive in several coalesced pieces"
    assert all(updates[i + 1].startswith(updates[i]) for i in range(len(updates) - 1))
    view = w.chat_view.view(mid)
    assert view.text() == updates[-1] and view.text().strip()
    assert view.state == "complete" and not view.state_badge.isVisible()
    stored = w.store.messages(w.current_id)
    assert [(m.role, m.state) for m in stored] == [("user", "complete"), ("assistant", "complete")]
    assert stored[0].content == "Write one sentence about the sea."
    assert stored[1].content == view.text()
    assert stored[1].usage["generated_tokens"] == fin.usage.generated_tokens
    # the conversation took its title from the first message; the status bar shows the speed
    assert w.store.conversation(w.current_id).title.startswith("Write one sentence")
    assert "tok/s" in w.status.speed_label.text()
    assert "Model: " in w.status.model_label.text() and "CPU" in w.status.backend_label.text()


def test_escape_stops_a_reply_mid_stream(qtbot, make_window):
    w = make_window()
    _use(w, LONG)
    w.composer.edit.setPlainText("Tell me a long story about a dragon.")
    with qtbot.waitSignal(w.chat.streamUpdated, timeout=30_000):
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
    assert w.composer.stop_button.isVisible() and not w.composer.send_button.isVisible()
    with qtbot.waitSignal(w.chat.streamFinished, timeout=10_000) as done:
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Escape)
    _cid, mid, fin = done.args
    assert fin.reason == "abort"
    assert fin.usage.generated_tokens < LONG.max_tokens
    reply = w.store.message(mid)
    assert reply.state == "stopped" and reply.content == w.chat_view.view(mid).text()
    assert w.chat_view.view(mid).state_badge.text() == "Stopped"
    assert w.composer.send_button.isVisible() and not w.composer.stop_button.isVisible()


def test_regenerate_replaces_the_last_reply(qtbot, make_window):
    w = make_window()
    _cid, first_id, _fin = send(qtbot, w, "Name a color.")
    first_text = w.store.message(first_id).content
    button = w.chat_view.view(first_id).regenerate_button
    assert button.isVisible() and button.isEnabled()
    with qtbot.waitSignal(w.chat.streamFinished, timeout=30_000) as done:
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    new_id = done.args[1]
    assert new_id != first_id and w.chat_view.view(first_id) is None
    messages = w.store.messages(w.current_id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].id == new_id
    assert messages[1].content == first_text   # greedy: the same words again
    # the earlier answer is kept as an alternative: ‹ 2/2 › pages back to it
    view = w.chat_view.view(new_id)
    assert view.alternatives == (2, 2) and view.alt_label.text() == "2/2" and view.prev_button.isVisible()
    qtbot.mouseClick(view.prev_button, Qt.MouseButton.LeftButton)
    assert [m.id for m in w.store.messages(w.current_id)][1] == first_id
    assert w.chat_view.view(first_id).alternatives == (1, 2) and w.chat_view.view(new_id) is None


def test_editing_a_message_resends_it_and_keeps_the_old_turns_as_a_branch(qtbot, make_window, monkeypatch):
    from PySide6.QtWidgets import QInputDialog

    w = make_window()
    _cid, reply1, _fin = send(qtbot, w, "Name a color.")
    send(qtbot, w, "And another one?")
    original_path = [m.id for m in w.store.messages(w.current_id)]
    first_user = original_path[0]
    # the edit is sent as the composer sends: without its leading blank lines and trailing whitespace
    monkeypatch.setattr(QInputDialog, "getMultiLineText", lambda *a, **k: ("\n  \nName a fruit.  \n", True))
    with qtbot.waitSignal(w.chat.streamFinished, timeout=30_000) as done:
        qtbot.mouseClick(w.chat_view.view(first_user).edit_button, Qt.MouseButton.LeftButton)
    path = w.store.messages(w.current_id)
    assert [m.role for m in path] == ["user", "assistant"] and path[0].content == "Name a fruit."
    assert path[1].id == done.args[1] and path[0].id != first_user
    edited_view = w.chat_view.view(path[0].id)
    assert edited_view.alternatives == (2, 2)
    # back to the original question: its whole branch (4 messages) is there, untouched
    qtbot.mouseClick(edited_view.prev_button, Qt.MouseButton.LeftButton)
    assert [m.id for m in w.store.messages(w.current_id)] == original_path
    assert [v.message_id for v in w.chat_view.views()] == original_path


def test_switching_conversations_while_one_streams(qtbot, make_window):
    w = make_window()
    streaming_id = w.current_id
    _use(w, LONG.__class__(**{**LONG.to_dict(), "max_tokens": 120}))
    w.composer.edit.setPlainText("Count from one to fifty in words.")
    with qtbot.waitSignal(w.chat.streamUpdated, timeout=30_000):
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
    qtbot.keyClick(w, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    other_id = w.current_id
    assert other_id != streaming_id
    assert w.chat_view.views() == [] and w.composer.send_button.isVisible()
    qtbot.wait(200)   # the first reply keeps streaming in the background
    w.sidebar.select(streaming_id)
    assert w.current_id == streaming_id
    reply_view = w.chat_view.views()[-1]
    assert reply_view.role == "assistant"
    stream = w.chat.stream_for(streaming_id)
    if stream is not None:
        assert reply_view.state == "streaming" and reply_view.text() == stream.text
        assert reply_view.detail_label.text() == "writing…"      # not the stored row's empty usage line
    qtbot.waitUntil(lambda: w.chat.stream_for(streaming_id) is None, timeout=60_000)
    reply = w.store.messages(streaming_id)[-1]
    assert reply.state == "complete" and reply.content == reply_view.text()
    assert w.store.messages(other_id) == []


def test_keyboard_shift_enter_newline_enter_sends_ctrl_n_new_chat(qtbot, make_window):
    w = make_window()
    edit = w.composer.edit
    edit.setFocus()
    qtbot.keyClicks(edit, "line one")
    qtbot.keyClick(edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(edit, "line two")
    assert edit.toPlainText() == "line one\nline two"
    assert w.store.messages(w.current_id) == []
    with qtbot.waitSignal(w.chat.streamFinished, timeout=30_000):
        qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert edit.toPlainText() == ""
    assert w.store.messages(w.current_id)[0].content == "line one\nline two"
    before = len(w.store.conversations())
    qtbot.keyClick(w, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert len(w.store.conversations()) == before + 1
    assert w.sidebar.current_id() == w.current_id
    # Ctrl+R regenerates the last reply of the current chat (none here: nothing happens)
    qtbot.keyClick(w, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
    assert w.chat.streaming_conversations() == set()


def test_a_reply_cut_by_the_token_limit_is_marked_and_continue_finishes_it(qtbot, make_window):
    """Greedy 8 tokens then Continue 8 more equals the same question answered with 16 tokens at once."""
    w = make_window()
    _use(w, LONG.__class__(**{**LONG.to_dict(), "max_tokens": 16}))
    _cid, whole_id, fin = send(qtbot, w, "Tell me about the moon.")
    assert fin.reason == "length"
    whole = w.store.message(whole_id).content
    w.new_conversation()
    _use(w, LONG.__class__(**{**LONG.to_dict(), "max_tokens": 8}))
    _cid, mid, fin = send(qtbot, w, "Tell me about the moon.")
    view = w.chat_view.view(mid)
    assert fin.reason == "length" and view.truncated
    assert view.state_badge.text() == "Cut off at the token limit" and view.continue_button.isVisible()
    first = view.text()
    with qtbot.waitSignal(w.chat.streamFinished, timeout=30_000) as blocker:
        qtbot.mouseClick(view.continue_button, Qt.MouseButton.LeftButton)
    assert blocker.args[1] == mid                                 # the same message went on
    stored = w.store.messages(w.current_id)
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[1].content == whole and stored[1].content.startswith(first) and view.text() == whole


def test_a_sent_message_keeps_its_first_lines_indentation(qtbot, make_window):
    """Leading blank lines and trailing whitespace go; the indentation of a pasted code block stays. Text of
    whitespace only is not sent."""
    w = make_window()
    w.composer.edit.setPlainText("  \n\t\n   ")
    qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
    assert w.store.messages(w.current_id) == [] and not w.chat.streaming_conversations()
    code = "    def f():\n        return 1\nWhat does this do?"
    send(qtbot, w, "\n   \n" + code + "  \n\n")
    user = w.store.messages(w.current_id)[0]
    assert user.role == "user" and user.content == code
    assert w.composer.edit.toPlainText() == ""


def test_a_long_prompt_shows_reading_progress_then_writing(qtbot, make_window):
    """A prompt read in several chunks shows 'Reading the conversation: n / total'; the engine reports no
    progress for the last chunk, so the first words of the reply must take the line back to what a streaming
    reply shows without progress."""
    w = make_window()
    _use(w, LONG.__class__(**{**LONG.to_dict(), "max_tokens": 4}))
    shown: dict[str, str] = {}
    progress: list[str] = []

    def detail(message_id: int) -> str:
        return w.chat_view.view(message_id).detail_label.text()

    w.chat.streamStarted.connect(lambda _c, mid: shown.setdefault("started", detail(mid)))
    w.chat.promptProgress.connect(lambda _c, mid, _p, _t: progress.append(detail(mid)))
    w.chat.streamUpdated.connect(lambda _c, mid, _text: shown.setdefault("first text", detail(mid)))
    items = " ".join(f"item{i} is a thing." for i in range(80))      # ~600 tokens: several prefill chunks
    _cid, _mid, fin = send(qtbot, w, f"{items}\nName one item.", timeout=60_000)
    assert fin.reason in ("stop", "length"), fin.error
    assert progress and all(p.startswith("Reading the conversation: ") for p in progress)
    assert shown["started"] and not shown["started"].startswith("Reading")
    assert shown["first text"] == shown["started"]


def test_a_reply_stopped_mid_stream_can_be_continued_into_the_same_message(qtbot, make_window):
    w = make_window()
    _use(w, LONG.__class__(**{**LONG.to_dict(), "max_tokens": 60}))
    w.composer.edit.setPlainText("Tell me a long story about a dragon.")
    with qtbot.waitSignal(w.chat.streamUpdated, timeout=30_000) as first:
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
    mid = first.args[1]
    with qtbot.waitSignal(w.chat.streamFinished, timeout=10_000):
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Escape)
    view = w.chat_view.view(mid)
    stopped = view.text()
    assert view.state == "stopped" and stopped
    assert view.continue_button.isVisible() and view.regenerate_button.isVisible()
    with qtbot.waitSignal(w.chat.streamFinished, timeout=30_000) as done:
        qtbot.mouseClick(view.continue_button, Qt.MouseButton.LeftButton)
    assert done.args[1] == mid                                   # the same message went on
    reply = w.store.message(mid)
    assert reply.state == "complete" and reply.content.startswith(stopped) and len(reply.content) > len(stopped)
    assert view.text() == reply.content and view.state_badge.text() != "Stopped"
