"""The history file fails: at start it can't be opened (the user is told which file and why, may start an empty
history beside it or quit; the file is never deleted or changed); mid-chat it refuses writes (the reply goes on,
the user is told, and it is saved once the file can be written again; a lock held elsewhere never stalls the
window for long); the user's own changes it refuses (rename, delete, settings...) are reported and leave the window
as stored; damage found in use is explained, and the next start offers to set the file aside."""
from __future__ import annotations

import re
import sqlite3

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QInputDialog, QMessageBox

from app.__main__ import open_history
from app.chat_controller import MAX_RETRY_GAP_TICKS
from app.main_window import MainWindow
from app.store import BRIEF_LOCK_WAIT_S, SCHEMA_VERSION, Store
from app.widgets.conversation_settings import ConversationSettingsDialog
from tests.gui.conftest import LONG, when_modal_shown

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]

GARBAGE = b"\x89not a database\x00" * 300


def _click_when_shown(label: str | None, seen: list[QMessageBox]) -> None:
    """Clicks the button labelled `label` (None: records the box and closes it) once the box is open."""
    def click(box):
        seen.append((box.text(), [b.text() for b in box.buttons()]))
        if label is None:
            box.reject()
        else:
            next(b for b in box.buttons() if b.text().replace("&", "") == label).click()
    when_modal_shown(QMessageBox, click)


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

def _start_a_long_reply(qtbot, w) -> int:
    """Sends a prompt that makes the model write at length; returns the reply's id once it writes."""
    w.store.set_conversation_settings(w.current_id, "", LONG.to_dict())
    w.composer.edit.setPlainText("Write a long story about the moon.")
    with qtbot.waitSignal(w.chat.writingStarted, timeout=30_000) as started:
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
    return started.args[1]



def _stored(db_path, message_id: int) -> tuple[str, str]:
    """What another process would read: the reply's state and text on disk."""
    with sqlite3.connect(db_path) as raw:
        return raw.execute("SELECT state, content FROM messages WHERE id=?", (message_id,)).fetchone()


def test_a_reply_the_history_refuses_is_kept_shown_and_saved_once_it_can_be(qtbot, make_window, db_path):
    w = make_window()
    _start_a_long_reply(qtbot, w)
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
    reply_id = _start_a_long_reply(qtbot, w)
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


# -- another program holds the history's write lock -------------------------------------------------------------
class LockWaits:
    """Every write the window's connection starts, with how long SQLite would wait for a lock held elsewhere
    (its busy timeout then, ms): what the GUI thread can stall for. Read from SQLite's own statement trace."""

    def __init__(self, db: sqlite3.Connection):
        self.timeout_ms = db.execute("PRAGMA busy_timeout").fetchone()[0]
        self.writes: list[tuple[str, int]] = []
        db.set_trace_callback(self._statement)

    def _statement(self, sql: str) -> None:
        if set_to := re.fullmatch(r"PRAGMA busy_timeout\s*=\s*(\d+)", sql.strip()):
            self.timeout_ms = int(set_to[1])
        elif sql.lstrip().upper().startswith(("UPDATE", "INSERT", "DELETE")):
            self.writes.append((sql, self.timeout_ms))

    def partial_saves(self) -> list[int]:
        return [ms for sql, ms in self.writes if "state='streaming'" in sql]

    def long_waits(self) -> int:
        return sum(ms > BRIEF_LOCK_WAIT_S * 1000 for _sql, ms in self.writes)


def test_a_history_locked_elsewhere_never_stalls_the_window_for_long(qtbot, make_window, db_path):
    w = make_window()
    reply_id = _start_a_long_reply(qtbot, w)
    other = sqlite3.connect(db_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")                # another program's write transaction, held
    try:
        waits = LockWaits(w.store._db)
        qtbot.waitUntil(lambda: bool(waits.partial_saves()), timeout=60_000)
        with qtbot.waitSignal(w.chat.streamFinished, timeout=120_000):
            pass
        assert max(waits.partial_saves()) <= BRIEF_LOCK_WAIT_S * 1000     # each try waits briefly...
        assert waits.long_waits() <= 1                  # ...only the final text, first tried, may wait longer
        assert w.banner.isVisible() and "Another program is using" in w.banner.body.text()

        after_finish = LockWaits(w.store._db)
        ticks = 2 * MAX_RETRY_GAP_TICKS
        for _ in range(ticks):                          # 16 s of the save timer, the lock still held
            w.chat._saver.timeout.emit()
        assert after_finish.long_waits() == 0
        assert 0 < len(after_finish.writes) <= ticks // 4     # backed off: not a try at every tick
    finally:
        other.execute("ROLLBACK")
        other.close()
    w.chat.save_partials()                              # a reply's end or closing tries at once
    assert _stored(db_path, reply_id) == ("complete", w.chat_view.view(reply_id).text())


# -- the user's own changes, refused ---------------------------------------------------------------------------
@pytest.fixture
def two_answers(make_window):
    """A window (no model) showing "Kept title": a question and the second of two alternative answers."""
    w = make_window(engine="own")
    cid = w.current_id
    w.store.rename(cid, "Kept title")
    question = w.store.add_message(cid, "user", "Which colour?")
    for answer in ("Blue.", "Green."):
        reply = w.store.begin_reply(cid, parent_id=question.id)
        w.store.finish_reply(reply.id, answer)
    w.refresh_conversations()
    w.show_conversation(cid)
    assert _shown(w) == ["Which colour?", "Green."]
    yield w
    _refuse_writes(w.store, False)


def _shown(w) -> list[str]:
    return [v.text() for v in w.chat_view.views()]


def _assert_refusal_reported_and_nothing_changed(w, cid: int) -> None:
    body = w.banner.body.text()
    assert w.banner.isVisible() and "readonly" in body and "not made" in body
    assert w.store.conversation(cid).title == "Kept title" and w.title_label.text() == "Kept title"
    assert w.sidebar.ids() == [cid] and w.sidebar.list.item(0).text() == "Kept title"
    assert w.current_id == cid and _shown(w) == ["Which colour?", "Green."]
    assert [m.content for m in w.store.messages(cid)] == ["Which colour?", "Green."]


def test_a_refused_rename_is_reported_and_the_old_title_stays(qtbot, two_answers):
    w, cid = two_answers, two_answers.current_id
    _refuse_writes(w.store)
    when_modal_shown(QInputDialog, lambda d: (d.setTextValue("New title"), d.accept()))
    w.sidebar.renameRequested.emit(cid)
    _assert_refusal_reported_and_nothing_changed(w, cid)


def test_a_refused_chat_delete_is_reported_and_the_chat_stays(qtbot, two_answers):
    w, cid = two_answers, two_answers.current_id
    _refuse_writes(w.store)
    _click_when_shown("Yes", [])
    w.sidebar.deleteRequested.emit(cid)
    _assert_refusal_reported_and_nothing_changed(w, cid)


def test_refused_chat_settings_are_reported_and_the_stored_ones_stay(qtbot, two_answers):
    w, cid = two_answers, two_answers.current_id
    before = w.store.conversation(cid)
    _refuse_writes(w.store)
    when_modal_shown(ConversationSettingsDialog, lambda d: (d.system_prompt.setPlainText("Answer in French."), d.accept()))
    w.conv_settings_button.click()
    _assert_refusal_reported_and_nothing_changed(w, cid)
    assert w.store.conversation(cid) == before


def test_a_refused_switch_of_alternatives_is_reported_and_the_shown_answer_stays(qtbot, two_answers):
    w, cid = two_answers, two_answers.current_id
    green = w.chat_view.views()[-1].message_id
    _refuse_writes(w.store)
    w.chat_view.alternativeRequested.emit(green, -1)
    _assert_refusal_reported_and_nothing_changed(w, cid)


def test_a_refused_message_delete_is_reported_and_the_message_stays(qtbot, two_answers):
    w, cid = two_answers, two_answers.current_id
    _refuse_writes(w.store)
    _click_when_shown("Yes", [])
    w.chat_view.deleteRequested.emit(w.chat_view.views()[-1].message_id)
    _assert_refusal_reported_and_nothing_changed(w, cid)


# -- damage found in use ---------------------------------------------------------------------------------------
def _damage_search_index(db_path) -> None:
    """Garbage over the root page of the full-text index: nothing start-up reads, searching does."""
    with sqlite3.connect(db_path) as raw:
        root, = raw.execute("SELECT rootpage FROM sqlite_master WHERE name='messages_fts_idx'").fetchone()
        page_size, = raw.execute("PRAGMA page_size").fetchone()
    raw.close()
    with open(db_path, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xa5" * page_size)


def test_damage_found_in_use_is_explained_and_the_next_start_offers_a_way_out(qtbot, db_path, settings):
    store = Store(db_path)
    cid = store.create_conversation("Colours").id
    store.add_message(cid, "user", "Which colour is the sky?")
    store.close()
    _damage_search_index(db_path)
    store = Store(db_path)                              # opens: the damage is where start-up does not look
    window = MainWindow(store, settings)
    qtbot.addWidget(window)
    window.show()

    window.sidebar.search.setText("sky")                # the search reads the damaged index

    body = window.banner.body.text()
    assert window.banner.isVisible() and "damaged" in window.banner.title.text()
    assert str(db_path) in body and "malformed" in body and "start it again" in body
    assert window.current_id == cid and [v.text() for v in window.chat_view.views()] == ["Which colour is the sky?"]
    window.close()
    store.close()

    seen: list = []
    _click_when_shown("Start an empty history", seen)
    again = open_history(db_path)                       # the next start checks the file
    (text, _buttons), = seen
    assert str(db_path) in text and "damaged" in text
    assert again is not None and again.conversations() == []
    assert any(re.search(r"\.unreadable-[\d-]+$", p.name) for p in _kept_files(db_path.parent))
    again.close()
