"""The history file fails: at start it can't be opened (the user is told which file and why, may start an empty
history beside it or quit; the file is never deleted or changed); mid-chat it refuses writes (the reply goes on,
the user is told, and it is saved once the file can be written again)."""
from __future__ import annotations

import sqlite3

import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from app.__main__ import open_history
from app.main_window import MainWindow
from app.store import SCHEMA_VERSION, Store
from tests.gui.conftest import LONG

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]

GARBAGE = b"\x89not a database\x00" * 300


def _click_when_shown(label: str | None, seen: list[QMessageBox]) -> None:
    """Clicks the button labelled `label` (None: records the box and closes it) once the box is open."""
    def click():
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(20, click)
            return
        seen.append((box.text(), [b.text() for b in box.buttons()]))
        if label is None:
            box.reject()
        else:
            next(b for b in box.buttons() if b.text().replace("&", "") == label).click()
    QTimer.singleShot(0, click)


def _kept_files(folder):
    return sorted(p for p in folder.iterdir() if ".unreadable-" in p.name)


def test_a_damaged_history_is_explained_kept_and_a_new_one_starts_beside_it(qtbot, db_path, settings):
    db_path.parent.mkdir(parents=True)
    db_path.write_bytes(GARBAGE)
    seen: list = []
    _click_when_shown("Start an empty history", seen)

    store = open_history(db_path)

    (text, buttons), = seen
    assert str(db_path) in text and "damaged" in text and "Quit" in buttons
    (kept,) = _kept_files(db_path.parent)
    assert kept.read_bytes() == GARBAGE           # set aside whole, not deleted nor overwritten
    assert store is not None and store.conversations() == []
    window = MainWindow(store, settings)          # the user goes on with an empty history
    qtbot.addWidget(window)
    window.store.add_message(window.current_id, "user", "still works")
    window.close()
    store.close()


def test_quitting_leaves_a_damaged_history_untouched(qtbot, db_path):
    db_path.parent.mkdir(parents=True)
    db_path.write_bytes(GARBAGE)
    seen: list = []
    _click_when_shown("Quit", seen)

    assert open_history(db_path) is None
    assert db_path.read_bytes() == GARBAGE and _kept_files(db_path.parent) == []


def test_a_newer_apps_history_is_only_explained(qtbot, db_path):
    """Not damaged: updating the app opens it, so nothing is offered that would move it."""
    store = Store(db_path)
    store.create_conversation("from the future")
    store.close()
    raw = sqlite3.connect(db_path)
    raw.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    raw.commit()
    raw.close()
    seen: list = []
    _click_when_shown(None, seen)

    assert open_history(db_path) is None
    (text, buttons), = seen
    assert "newer Halo Chat" in text and buttons == ["Quit"]
    assert _kept_files(db_path.parent) == []


def _refuse_writes(store: Store, refuse: bool = True) -> None:
    """The history's own SQLite refuses every write, as for a read-only file ("attempt to write a readonly
    database"); a full disk or another program's lock fail the same way."""
    store._db.execute(f"PRAGMA query_only={'ON' if refuse else 'OFF'}")


def _stored(db_path, message_id: int) -> tuple[str, str]:
    """What another process would read: the reply's state and text on disk."""
    with sqlite3.connect(db_path) as raw:
        return raw.execute("SELECT state, content FROM messages WHERE id=?", (message_id,)).fetchone()


def test_a_reply_the_history_refuses_is_kept_shown_and_saved_once_it_can_be(qtbot, make_window, db_path):
    w = make_window()
    w.store.set_conversation_settings(w.current_id, "", LONG.to_dict())
    w.composer.edit.setPlainText("Write a long story about the moon.")
    with qtbot.waitSignal(w.chat.writingStarted, timeout=30_000):
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
    _refuse_writes(w.store)

    with qtbot.waitSignal(w.chat.streamFinished, timeout=120_000) as done:
        pass
    _cid, reply_id, _fin = done.args
    view = w.chat_view.view(reply_id)
    assert w.chat.stream_for(w.current_id) is None and not w.composer.stop_button.isVisibleTo(w)
    assert view.state == "complete" and view.text() and view.text() == w.chat.message(reply_id).content
    assert w.banner.isVisible() and "readonly" in w.banner.body.text()
    assert _stored(db_path, reply_id)[0] == "streaming"        # nothing written yet; the text is held

    _refuse_writes(w.store, False)
    w.chat.save_partials()                                     # the save timer's next tick
    assert _stored(db_path, reply_id) == ("complete", view.text())
    assert w.chat.unsaved_replies() == 0


def test_a_message_the_history_refuses_stays_in_the_composer(qtbot, make_window, db_path):
    w = make_window()
    _refuse_writes(w.store)
    w.composer.edit.setPlainText("Keep these words.")
    qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)

    assert w.composer.edit.toPlainText() == "Keep these words."
    assert w.chat.stream_for(w.current_id) is None and w.banner.isVisible()
    _refuse_writes(w.store, False)


def test_closing_while_the_history_refuses_a_reply_asks_first_and_then_keeps_it(qtbot, make_window, db_path):
    w = make_window()
    w.store.set_conversation_settings(w.current_id, "", LONG.to_dict())
    w.composer.edit.setPlainText("Write a long story about the moon.")
    with qtbot.waitSignal(w.chat.streamStarted, timeout=30_000) as started:
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
    _cid, reply_id = started.args
    qtbot.waitUntil(lambda: len(w.chat_view.view(reply_id).text()) > 20, timeout=60_000)
    _refuse_writes(w.store)
    seen: list = []
    _click_when_shown("Cancel", seen)

    w.close()                                        # the stopped reply can't be written: closing would lose it

    (text, _buttons), = seen
    assert "could not be saved" in text and w.isVisible()
    assert w.chat_view.view(reply_id).state == "stopped"
    _refuse_writes(w.store, False)
    w.close()
    state, content = _stored(db_path, reply_id)
    assert not w.isVisible() and state == "stopped" and content == w.chat_view.view(reply_id).text()
