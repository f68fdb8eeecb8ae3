"""A turn the history refuses in part keeps the user's words exactly once: an edit whose new message is refused
stays with the message, to send once it can be; a message stored whose auto-title is refused is not given back
to the composer (sending it again would store it twice); a message whose row went in but whose making it the
shown one was refused is not left behind while its words go back to the composer.

Refusal is SQLite's own: `PRAGMA query_only` (every write) or an authorizer that denies one column's updates
(the write that fails halfway through a turn)."""
from __future__ import annotations

import sqlite3

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QInputDialog

from tests.gui.conftest import send, when_modal_shown

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]


def _refuse_writes(store, refuse: bool = True) -> None:
    store._db.execute(f"PRAGMA query_only={'ON' if refuse else 'OFF'}")


def _refuse_updates_of(store, table: str, column: str) -> None:
    """SQLite refuses to prepare any UPDATE of table.column ("not authorized"); other writes go through."""
    def authorize(action, arg1, arg2, _db, _trigger):
        if action == sqlite3.SQLITE_UPDATE and (arg1, arg2) == (table, column):
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK
    store._db.set_authorizer(authorize)


def _edit(qtbot, w, message_id: int, new_text: str | None, seen: list[str]) -> None:
    """Clicks Edit on a message; records the text the editor opens with and types `new_text` (None: cancels)."""
    def answer(dialog):
        seen.append(dialog.textValue())
        if new_text is None:
            dialog.reject()
        else:
            dialog.setTextValue(new_text)
            dialog.accept()
    when_modal_shown(QInputDialog, answer)
    qtbot.mouseClick(w.chat_view.view(message_id).edit_button, Qt.MouseButton.LeftButton)


def test_an_edit_the_history_refuses_is_kept_and_the_next_edit_opens_with_it(qtbot, make_window):
    w = make_window()
    send(qtbot, w, "Name a color.")
    question = w.store.messages(w.current_id)[0].id
    _refuse_writes(w.store)
    seen: list[str] = []

    _edit(qtbot, w, question, "Name a fruit, please.", seen)

    assert w.banner.isVisible() and "readonly" in w.banner.body.text() and "click Edit" in w.banner.body.text()
    assert [v.text() for v in w.chat_view.views()][0] == "Name a color."      # what is stored
    _refuse_writes(w.store, False)
    _edit_and_keep(qtbot, w, question, seen)

    assert seen == ["Name a color.", "Name a fruit, please."]                  # the editor opened with the edit
    assert w.chat.stream_for(w.current_id) is not None
    qtbot.waitUntil(lambda: w.chat.stream_for(w.current_id) is None, timeout=30_000)
    assert [m.content for m in w.store.messages(w.current_id)][0] == "Name a fruit, please."


def _edit_and_keep(qtbot, w, message_id: int, seen: list[str]) -> None:
    """Clicks Edit and sends what the editor opens with."""
    def answer(dialog):
        seen.append(dialog.textValue())
        dialog.accept()
    when_modal_shown(QInputDialog, answer)
    qtbot.mouseClick(w.chat_view.view(message_id).edit_button, Qt.MouseButton.LeftButton)


def test_a_message_stored_whose_title_is_refused_is_sent_once(qtbot, make_window):
    w = make_window()
    _refuse_updates_of(w.store, "conversations", "title")

    w.composer.edit.setPlainText("Name a color.")
    qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)

    assert w.composer.edit.toPlainText() == ""                    # nothing to send twice
    assert w.chat.stream_for(w.current_id) is not None            # the reply to it goes on
    qtbot.waitUntil(lambda: w.chat.stream_for(w.current_id) is None, timeout=30_000)
    assert [(m.role, m.content) for m in w.store.messages(w.current_id)][0] == ("user", "Name a color.")
    assert [m.role for m in w.store.messages(w.current_id)] == ["user", "assistant"]
    assert w.banner.isVisible()                                   # the title that was not written is told
    assert w.store.conversation(w.current_id).title == "New chat"


def test_a_message_half_written_is_not_left_stored_while_its_words_go_back_to_the_composer(qtbot, make_window):
    w = make_window()
    _refuse_updates_of(w.store, "messages", "active")             # the row goes in; making it shown is refused
    w.composer.edit.setPlainText("Name a color.")
    qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)

    assert w.composer.edit.toPlainText() == "Name a color." and w.banner.isVisible()
    w.store._db.set_authorizer(None)
    assert w.store.messages(w.current_id) == []                   # sending it again stores it once
    assert w.chat.stream_for(w.current_id) is None
