"""The window on small screens: 600 px wide with long labels, a sidebar that folds, a default size that
fits, Settings that scrolls, a message box that grows, Esc that stops a reply wherever the focus is."""
from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.widgets.composer import EDIT_MAX_LINES, EDIT_MIN_HEIGHT
from app.widgets.settings_dialog import SettingsDialog
from tests.gui.conftest import LONG

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]
LONG_TITLE = " ".join(["A very long conversation title about harbours, lighthouses and the boats between them"] * 3)


def test_the_window_fits_600_px_with_long_labels_and_a_folding_sidebar(make_window, qtbot):
    window = make_window(engine="own")
    avail = window.screen().availableGeometry()
    assert window.width() <= avail.width() and window.height() <= avail.height()   # default size fits
    window.store.rename(window.current_id, LONG_TITLE)
    window.refresh_conversations()
    window.status.flash("Reading " + "a-very-long-file-name-" * 20 + ".gguf…")
    long_model = "Some-Very-Long-Model-Name-" * 8 + "Q4_K_M  ▾"
    window.model_button.setText(long_model)                    # a long model name does not widen it either
    assert window.model_button.text() == long_model and "…" in window.model_button.shown_text()
    assert window.model_button.toolTip() == long_model
    assert window.model_button.sizeHint().width() <= window.model_button.maximumWidth()
    window.resize(600, 560)
    qtbot.waitUntil(lambda: window.width() == 600)
    QApplication.processEvents()
    assert not window.sidebar.isVisible()                        # folded away by itself when narrow
    assert window.title_label.shown_text().endswith("…") and window.title_label.toolTip() == LONG_TITLE
    assert window.status.note_label.shown_text().endswith("…")
    assert window.minimumSizeHint().width() <= 600
    window.sidebar_folding.action.trigger()                      # View > Show sidebar (Ctrl+B)
    qtbot.waitUntil(window.sidebar.isVisible)
    QApplication.processEvents()
    assert window.width() == 600 and window.minimumSizeHint().width() <= 600
    window.resize(1000, 700)
    qtbot.waitUntil(lambda: window.width() == 1000)
    assert window.sidebar.isVisible() and window.title_label.shown_text() != window.title_label.text()[:3]


def test_settings_scroll_on_a_short_screen(make_window, qtbot, settings):
    window = make_window(engine="own")
    dlg = SettingsDialog(settings, window)
    qtbot.addWidget(dlg)
    dlg.resize(560, 600)                        # what a 1366x768 screen leaves under a panel and a title bar
    dlg.show()
    qtbot.waitExposed(dlg)
    assert dlg.height() <= 600
    assert dlg.scroll.verticalScrollBar().maximum() > 0           # the content is taller: it scrolls
    last = dlg.sampling.context_overflow
    dlg.scroll.ensureWidgetVisible(last)
    QApplication.processEvents()
    top_left = last.mapTo(dlg.scroll.viewport(), last.rect().topLeft())
    assert dlg.scroll.viewport().rect().contains(top_left)
    assert dlg.scroll.widget().isAncestorOf(last)


def test_the_message_box_grows_with_its_text_up_to_a_limit(make_window, qtbot):
    window = make_window(engine="own")
    edit = window.composer.edit
    assert edit.height() == EDIT_MIN_HEIGHT
    edit.setPlainText("\n".join(f"line {i}" for i in range(6)))
    grown = edit.height()
    assert grown > EDIT_MIN_HEIGHT
    edit.setPlainText("\n".join(f"line {i}" for i in range(60)))
    tallest = edit.height()
    assert tallest > grown and tallest <= (EDIT_MAX_LINES + 2) * edit.fontMetrics().lineSpacing()
    assert edit.verticalScrollBar().maximum() > 0                 # past the limit it scrolls
    edit.clear()
    assert edit.height() == EDIT_MIN_HEIGHT


@pytest.mark.golden
def test_esc_stops_a_reply_from_anywhere_and_the_marker_survives_long_titles(make_window, qtbot):
    window = make_window()
    window.store.set_conversation_settings(window.current_id, "", LONG.to_dict())
    window.store.rename(window.current_id, LONG_TITLE)
    window.refresh_conversations()
    assert "Esc" in window.composer.stop_button.text()
    window.composer.edit.setPlainText("Tell me a long story about a dragon.")
    with qtbot.waitSignal(window.chat.streamUpdated, timeout=30_000):
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    item = window.sidebar.list.currentItem()
    assert item.text().startswith("● ")                         # at the front: eliding the title keeps it
    assert window.composer.stop_button.isVisible()
    window.sidebar.list.setFocus()
    with qtbot.waitSignal(window.chat.streamFinished, timeout=30_000) as blocker:
        qtbot.keyClick(window.sidebar.list, Qt.Key.Key_Escape)
    assert blocker.args[2].reason == "abort"
    assert not window.sidebar.list.currentItem().text().startswith("●")


def test_a_cut_off_replys_badge_and_speed_stay_readable_in_a_640_px_window(make_window, qtbot):
    """The header's elided labels get their room from the layout: at 640 px the badge showed nothing at all
    (a label the layout could squeeze to 0 px), now it shows as much of its words as fits."""
    window = make_window(engine="own")
    cid = window.current_id
    window.store.add_message(cid, "user", "Tell me about harbours")
    reply = window.store.begin_reply(cid)
    window.store.finish_reply(reply.id, "Harbours are sheltered waters", usage={
        "finish_reason": "length", "generated_tokens": 160, "decode_tokens_per_s": 17.4})
    window.show_conversation(cid)
    for width in (1000, 640):
        window.resize(width, 560)
        qtbot.waitUntil(lambda width=width: window.width() == width)
        QApplication.processEvents()
        view = window.chat_view.view(reply.id)
        badge = view.state_badge
        assert badge.text() == "Cut off at the token limit" and badge.isVisible()
        assert badge.width() >= badge.minimumSizeHint().width() > 0
        shown = badge.shown_text().removesuffix("…")
        assert len(shown) >= 3 and badge.text().startswith(shown), badge.shown_text()
        assert view.detail_label.width() > 0 and view.detail_label.shown_text().removesuffix("…")
