"""The keyboard habits of desktop chat apps, pressed on the real window: Delete in the chat list asks first
(and Enter there keeps the chat), Ctrl+Tab goes through the chats, Tab leaves every control of the
dialogs, Enter in the model library loads the picked model, Enter while an input method composes does not
send, and the window comes back where it was, on screen even when that monitor is gone."""
from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtGui import QInputMethodEvent
from PySide6.QtWidgets import QApplication, QFileDialog, QMessageBox

from app.settings import Sampling
from app.widgets.conversation_settings import ConversationSettingsDialog
from app.widgets.settings_dialog import SettingsDialog
from tests.gui.conftest import when_modal_shown

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]
CTRL, SHIFT = Qt.KeyboardModifier.ControlModifier, Qt.KeyboardModifier.ShiftModifier


def _on_next_message_box(act, seen: list[str]) -> None:
    """Calls act(box) on the real QMessageBox once it is open."""
    def answer(box):
        seen.append(box.text())
        act(box)
    when_modal_shown(QMessageBox, answer)


def test_delete_in_the_chat_list_asks_first_and_enter_keeps_the_chat(qtbot, make_window):
    w = make_window(engine="own")
    w.new_conversation()
    doomed = w.current_id
    w.sidebar.list.setFocus()
    seen: list[str] = []
    # Enter on the question presses its default button, which must be the safe one
    _on_next_message_box(lambda box: qtbot.keyClick(box, Qt.Key.Key_Return), seen)
    qtbot.keyClick(w.sidebar.list, Qt.Key.Key_Delete)
    assert seen and "cannot be undone" in seen[0]
    assert doomed in w.sidebar.ids()
    w.activateWindow()                        # offscreen, nothing hands the activation back after a modal box
    qtbot.waitUntil(w.isActiveWindow)
    w.sidebar.list.setFocus()
    _on_next_message_box(lambda box: box.button(QMessageBox.StandardButton.Yes).click(), seen)
    qtbot.keyClick(w.sidebar.list, Qt.Key.Key_Delete)
    assert len(seen) == 2 and doomed not in w.sidebar.ids()


def test_delete_in_the_composer_deletes_a_letter_not_the_chat(qtbot, make_window):
    w = make_window(engine="own")
    w.composer.edit.setPlainText("ab")
    w.composer.edit.setFocus()
    w.composer.edit.moveCursor(w.composer.edit.textCursor().MoveOperation.Start)
    qtbot.keyClick(w.composer.edit, Qt.Key.Key_Delete)            # no question opens: it would block here
    assert w.composer.edit.toPlainText() == "b" and len(w.sidebar.ids()) == 1


def test_ctrl_tab_and_ctrl_shift_tab_go_through_the_chats(qtbot, make_window):
    w = make_window(engine="own")
    w.new_conversation()
    w.new_conversation()
    first, second, third = w.sidebar.ids()                      # newest first, the newest shown
    assert w.current_id == first
    qtbot.keyClick(w.composer.edit, Qt.Key.Key_Tab, CTRL)
    assert w.current_id == second
    qtbot.keyClick(w.sidebar.list, Qt.Key.Key_Tab, CTRL)
    assert w.current_id == third
    qtbot.keyClick(w.composer.edit, Qt.Key.Key_Tab, CTRL)        # round again, as browsers' tabs do
    assert w.current_id == first
    qtbot.keyClick(w.composer.edit, Qt.Key.Key_Backtab, CTRL | SHIFT)   # what Windows sends for Ctrl+Shift+Tab
    assert w.current_id == third
    assert w.sidebar.current_id() == third


def _focus_after_tab(qtbot, widget):
    widget.setFocus()
    qtbot.keyClick(widget, Qt.Key.Key_Tab)
    return QApplication.focusWidget()


def test_tab_leaves_the_system_prompt_of_both_settings_dialogs(qtbot, make_window, settings):
    w = make_window(engine="own")
    dialogs = (SettingsDialog(settings, w),
               ConversationSettingsDialog("Chat", "Be brief.", Sampling(), Sampling(), "Be brief.", w))
    for dlg in dialogs:
        qtbot.addWidget(dlg)
        dlg.show()
        dlg.activateWindow()
        qtbot.waitUntil(dlg.isActiveWindow)
        before = dlg.system_prompt.toPlainText()
        after = _focus_after_tab(qtbot, dlg.system_prompt)
        assert dlg.system_prompt.toPlainText() == before            # no tab character typed into the prompt
        assert after is not dlg.system_prompt and dlg.isAncestorOf(after)
        dlg.reject()


def test_the_library_lets_tab_out_of_the_table_and_enter_loads_the_picked_model(qtbot, make_window, monkeypatch,
                                                                                two_tiny_models):
    # Enter used to press the dialog's first button: its file dialog would block this test, so it fails instead
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: pytest.fail("Enter opened a file dialog"))
    w = make_window(engine="own")
    w.models.show_library()
    dlg = w.models.library_dialog
    qtbot.waitUntil(lambda: dlg.table.rowCount() == 2, timeout=10_000)
    dlg.activateWindow()
    qtbot.waitUntil(dlg.isActiveWindow)
    dlg.select_path(str(two_tiny_models / "beta.gguf"))
    after = _focus_after_tab(qtbot, dlg.table)
    assert after is not dlg.table and dlg.isAncestorOf(after)
    dlg.table.setFocus()
    with qtbot.waitSignal(dlg.loadRequested, timeout=2_000) as blocker:
        qtbot.keyClick(dlg.table, Qt.Key.Key_Return)                 # not "Open GGUF…": a file dialog
    assert Path(blocker.args[0]).name == "beta.gguf"


def test_enter_while_an_input_method_composes_does_not_send(qtbot, make_window):
    w = make_window(engine="own")
    edit = w.composer.edit
    edit.setFocus()
    qtbot.keyClicks(edit, "konnichiwa ")
    sent: list[str] = []
    w.composer.sendRequested.connect(sent.append)
    QApplication.sendEvent(edit, QInputMethodEvent("にほ", []))      # a word being composed (preedit)
    qtbot.keyClick(edit, Qt.Key.Key_Return)                           # chooses the candidate: no send
    assert sent == []
    commit = QInputMethodEvent()
    commit.setCommitString("日本")
    QApplication.sendEvent(edit, commit)
    qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert sent == ["konnichiwa 日本"]


def _sidebar_width(window) -> int:
    return window.centralWidget().sizes()[0]


def test_the_window_comes_back_with_its_size_and_sidebar_width(qtbot, make_window):
    first = make_window(engine="own")
    first.resize(700, 520)
    first.centralWidget().setSizes([300, 400])
    qtbot.waitUntil(lambda: first.width() == 700 and _sidebar_width(first) == 300)
    first.close()
    again = make_window(engine="own")
    assert (again.width(), again.height()) == (700, 520)
    assert _sidebar_width(again) == 300


def test_a_window_saved_on_an_unplugged_monitor_opens_on_screen(qtbot, make_window):
    first = make_window(engine="own")
    first.resize(700, 500)
    first.move(5000, 4000)                   # where a second monitor was, right of and below this one
    qtbot.waitUntil(lambda: first.pos() == QPoint(5000, 4000))
    first.close()
    again = make_window(engine="own")
    avail: QRect = again.screen().availableGeometry()
    assert (again.width(), again.height()) == (700, 500)              # its size kept
    assert avail.contains(again.frameGeometry().topLeft())             # its title bar within reach
    assert avail.contains(again.geometry())                            # and all of it on this screen


def _looks_focused(qtbot, widget, elsewhere) -> bool:
    """Whether `widget` is drawn differently with the keyboard focus than without it."""
    elsewhere.setFocus()
    qtbot.waitUntil(elsewhere.hasFocus)
    without = widget.grab().toImage()
    widget.setFocus()
    qtbot.waitUntil(widget.hasFocus)
    return widget.grab().toImage() != without


def test_keyboard_focus_is_visible_on_buttons_and_the_chat_list(qtbot, make_window):
    w = make_window(engine="own")
    away = w.sidebar.search
    for widget in (w.conv_settings_button, w.composer.send_button, w.sidebar.new_button, w.sidebar.list):
        assert _looks_focused(qtbot, widget, away), widget
