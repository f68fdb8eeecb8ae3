"""History survives: delete asks first, a restart finds everything, a killed process loses nothing."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from PySide6.QtWidgets import QMessageBox

from app.main_window import MainWindow
from app.store import Store
from tests.gui.conftest import send, when_modal_shown

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]
REPO = Path(__file__).resolve().parents[2]


def _answer_next_message_box(button: QMessageBox.StandardButton, seen: list[str]) -> None:
    """Clicks `button` on the real QMessageBox once it is open."""
    def click(box):
        seen.append(box.text())
        box.button(button).click()
    when_modal_shown(QMessageBox, click)


@pytest.mark.golden
def test_delete_asks_for_confirmation(qtbot, make_window):
    w = make_window()
    send(qtbot, w, "Remember me.")
    doomed = w.current_id
    title = w.store.conversation(doomed).title
    seen: list[str] = []
    _answer_next_message_box(QMessageBox.StandardButton.Cancel, seen)
    w.delete_conversation(doomed)
    assert title in seen[0] and "cannot be undone" in seen[0]
    assert len(w.store.messages(doomed)) == 2 and doomed in w.sidebar.ids()
    _answer_next_message_box(QMessageBox.StandardButton.Yes, seen)
    w.delete_conversation(doomed)
    assert doomed not in [c.id for c in w.store.conversations()]
    assert doomed not in w.sidebar.ids()
    assert w.current_id is not None and w.current_id != doomed   # a fresh chat takes its place


def test_deleting_the_only_chat_a_search_matches_empties_the_chat_area(qtbot, make_window):
    w = make_window(engine="own")
    kept = w.current_id
    w.store.rename(kept, "Groceries")
    doomed = w.store.create_conversation(title="Chat number 1").id
    w.store.add_message(doomed, "user", "first words")
    w.sidebar.search.setText("number")
    w.refresh_conversations()
    w.sidebar.select(doomed)
    assert w.current_id == doomed and [v.text() for v in w.chat_view.views()] == ["first words"]
    seen: list[str] = []
    _answer_next_message_box(QMessageBox.StandardButton.Yes, seen)
    w.delete_conversation(doomed)
    assert w.current_id is None and w.sidebar.ids() == []
    assert w.chat_view.views() == [] and w.title_label.text() == ""
    assert kept in [c.id for c in w.store.conversations()]       # only the deleted chat went


@pytest.mark.golden
def test_restart_finds_history_rename_and_search(qtbot, make_window, db_path):
    w = make_window()
    _cid, reply_id, _fin = send(qtbot, w, "What is the capital of France?")
    reply = w.store.message(reply_id).content
    w.store.rename(w.current_id, "Geography")
    kept = w.current_id
    w.new_conversation()
    w.close()
    w.store.close()

    again = make_window(path=db_path)
    assert kept in again.sidebar.ids()
    again.sidebar.select(kept)
    texts = [(v.role, v.text()) for v in again.chat_view.views()]
    assert texts == [("user", "What is the capital of France?"), ("assistant", reply)]
    again.sidebar.search.setText("geo")
    assert again.sidebar.ids() == [kept]
    again.sidebar.search.setText("no such title")
    assert again.sidebar.ids() == []


_CRASH_SCRIPT = textwrap.dedent("""
    import sys
    from PySide6.QtWidgets import QApplication
    app = QApplication([])
    from app.main_window import MainWindow
    from app.settings import AppSettings, Sampling
    from app.store import Store
    settings = AppSettings()
    settings.sampling = Sampling(temperature=0.0, top_k=0, top_p=1.0, max_tokens=3, seed=0)
    w = MainWindow(Store(), settings)
    w.show()
    def first(_info):
        w.composer.edit.setPlainText("Say hi.")
        w.composer._submit()
    # The second prompt is one SmolLM2 answers at length under greedy decoding (300 tokens, finish "length"),
    # so the reply always outlives the 30 coalesced deltas after which the test hook kills the process.
    def then(_cid, _mid, _fin):
        long = Sampling(temperature=0.0, top_k=0, top_p=1.0, max_tokens=300, seed=0)
        w.store.set_conversation_settings(w.current_id, "", long.to_dict())
        w.composer.edit.setPlainText("Write a long story about the moon, at least ten paragraphs.")
        w.composer._submit()
    w.client.loaded.connect(first)
    w.chat.streamFinished.connect(then)
    w.models.load_path_now(sys.argv[1])
    sys.exit(app.exec())
""")


@pytest.mark.golden
@pytest.mark.slow
def test_killed_mid_reply_keeps_every_message_and_marks_the_cut(qtbot, tmp_path, smollm2_path, settings,
                                                                  db_path):
    script = tmp_path / "crash_app.py"
    script.write_text(_CRASH_SCRIPT)
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HALO_DATA_DIR": str(db_path.parent),
           "HALO_SETTINGS_DIR": str(tmp_path / "crash-settings"), "HALO_TEST_KILL_AFTER_DELTAS": "30",
           "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(script), str(smollm2_path)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, f"the app should have killed itself mid-reply:\n{proc.stderr[-2000:]}"

    store = Store(db_path)
    assert store.recovered_interrupted == 1
    (conv,) = store.conversations()
    messages = store.messages(conv.id)
    assert [(m.role, m.state) for m in messages] == [
        ("user", "complete"), ("assistant", "complete"), ("user", "complete"), ("assistant", "interrupted")]
    assert messages[0].content == "Say hi." and messages[1].content
    assert messages[2].content == "Write a long story about the moon, at least ten paragraphs."
    # 30 coalesced deltas take well over the 0.5 s save interval: part of the reply was saved as it streamed
    assert messages[3].content.strip()
    store.close()

    w = MainWindow(Store(db_path), settings)   # no model needed to read history
    qtbot.addWidget(w)
    w.show()
    w.sidebar.select(conv.id)
    views = w.chat_view.views()
    assert [v.role for v in views] == ["user", "assistant", "user", "assistant"]
    assert views[-1].state == "interrupted" and "Interrupted" in views[-1].state_badge.text()
    assert views[-1].text() == messages[3].content
    w.close()


def test_a_long_chat_opens_whole(qtbot, settings, db_path):
    """150 messages: the window opens the chat with every message and only the last reply's actions. (Loading
    made O(n^2) widget calls, and PySide6 6.12.0 on CPython 3.11, which took a reference from None per call,
    died of it: 'deallocating None'.)"""
    store = Store(db_path)
    conv = store.create_conversation(title="long")
    for i in range(75):
        store.add_message(conv.id, "user", f"question {i}")
        reply = store.begin_reply(conv.id)
        store.finish_reply(reply.id, f"answer {i}", usage={"generated_tokens": 2})
    store.close()
    w = MainWindow(Store(db_path), settings)
    qtbot.addWidget(w)
    w.show()
    w.sidebar.select(conv.id)
    views = w.chat_view.views()
    assert len(views) == 150 and views[-1].text() == "answer 74"
    assert [v.regenerate_button.isVisible() for v in views if v.role == "assistant"] == [False] * 74 + [True]
    w.close()
    w.store.close()


def test_qt_calls_leave_none_its_references(qtbot):
    """The binding's None leak itself (pyproject excludes 6.12.0 below Python 3.12): a few thousand calls that
    return nothing must not take None's references (on 3.12+ None is immortal and its count fixed)."""
    from PySide6.QtWidgets import QLabel

    label = QLabel()
    qtbot.addWidget(label)
    before = sys.getrefcount(None)
    for _ in range(2000):
        label.setVisible(False)
        label.setText("x")
    assert sys.getrefcount(None) >= before - 100
