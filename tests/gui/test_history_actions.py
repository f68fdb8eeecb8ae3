"""Deleting one message, searching message text from the sidebar, and exporting a chat, on the real window
and the real engine (starter model)."""
from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from tests.gui.conftest import send

pytestmark = [pytest.mark.gui, pytest.mark.golden, pytest.mark.qt_log_ignore("This plugin does not support")]


def test_delete_one_message_search_text_and_export(qtbot, make_window, monkeypatch, tmp_path):
    w = make_window()
    _cid, reply_id, _fin = send(qtbot, w, "Tell me a fact about otters.")
    conv = w.current_id
    user_id = w.store.messages(conv)[0].id
    w.new_conversation()
    other = w.current_id
    send(qtbot, w, "What is the capital of Peru?")

    # search: message text, from the sidebar's field
    w.sidebar.search.setText("otters")
    qtbot.waitUntil(lambda: [c.id for c in w.store.conversations(w.sidebar.search.text())] == [conv])
    w.sidebar.search.setText("")

    # export both formats, whole
    w.show_conversation(conv)
    w.export_conversation(conv, tmp_path / "otters.md")
    w.export_conversation(conv, tmp_path / "otters.json")
    md = (tmp_path / "otters.md").read_text(encoding="utf-8")
    data = json.loads((tmp_path / "otters.json").read_text(encoding="utf-8"))
    stored = w.store.messages(conv)
    assert md.startswith("# Tell me a fact about otters.") and stored[1].content in md
    assert [(m["role"], m["content"]) for m in data["messages"]] == [(m.role, m.content) for m in stored]
    with pytest.raises(ValueError):
        w.export_conversation(conv, tmp_path / "otters.txt")

    # delete one message: asked first; Cancel keeps it, Yes removes only it
    view = w.chat_view.view(reply_id)
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Cancel)
    qtbot.mouseClick(view.delete_button, Qt.MouseButton.LeftButton)
    assert [m.id for m in w.store.messages(conv)] == [user_id, reply_id]
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    qtbot.mouseClick(view.delete_button, Qt.MouseButton.LeftButton)
    assert [m.id for m in w.store.messages(conv)] == [user_id]
    assert w.chat_view.view(reply_id) is None and w.chat_view.view(user_id) is not None
    assert len(w.store.messages(other)) == 2                       # the other chat is untouched
