"""Where the user types. Enter sends, Shift+Enter breaks the line, Esc stops a reply in progress; while an input
method is composing a word, Enter is its own."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget


class ComposerEdit(QPlainTextEdit):
    submitted = Signal()
    escaped = Signal()

    def composing(self) -> bool:
        """An input method (Japanese, Chinese, Korean...) has a word in progress: read from the text's layout,
        where Qt keeps it, so no flag of ours can go stale."""
        return bool(self.textCursor().block().layout().preeditAreaText())

    def keyPressEvent(self, event: QKeyEvent) -> None:
        key, mods = event.key(), event.modifiers()
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if self.composing():     # the input method's Enter (it commits the word), never a send
                return
            if mods & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
            else:
                self.submitted.emit()
            return
        if key == Qt.Key.Key_Escape:
            self.escaped.emit()
            return
        super().keyPressEvent(event)


EDIT_MIN_HEIGHT = 64      # px: about three lines
EDIT_MAX_LINES = 12       # the box grows with its text up to this many lines, then scrolls


class Composer(QWidget):
    sendRequested = Signal(str)
    stopRequested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(24, 6, 24, 12)
        outer.setSpacing(4)
        box = QFrame()
        box.setObjectName("Composer")
        row = QHBoxLayout(box)
        row.setContentsMargins(8, 6, 8, 6)
        self.edit = ComposerEdit()
        self.edit.setPlaceholderText("Message the model…")
        self.edit.setFixedHeight(EDIT_MIN_HEIGHT)
        self.edit.document().contentsChanged.connect(self._fit_height)
        self.edit.setTabChangesFocus(True)
        self.edit.submitted.connect(self._submit)
        self.edit.escaped.connect(self.stopRequested)
        row.addWidget(self.edit, 1)
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("Primary")
        self.send_button.clicked.connect(self._submit)
        self.stop_button = QPushButton("Stop  (Esc)")
        self.stop_button.setToolTip("Stop the reply: Esc, anywhere in the window")
        self.stop_button.clicked.connect(self.stopRequested)
        self.stop_button.hide()
        row.addWidget(self.send_button, 0, Qt.AlignmentFlag.AlignBottom)
        row.addWidget(self.stop_button, 0, Qt.AlignmentFlag.AlignBottom)
        outer.addWidget(box)
        self.hint = QLabel("Enter to send · Shift+Enter for a new line · Esc to stop")
        self.hint.setObjectName("Hint")
        outer.addWidget(self.hint)
        self._can_send = True

    def _fit_height(self) -> None:
        """As tall as the text (wrapped lines included), between EDIT_MIN_HEIGHT and EDIT_MAX_LINES lines."""
        line = self.edit.fontMetrics().lineSpacing()
        doc = self.edit.document()
        lines = sum(doc.documentLayout().blockBoundingRect(b).height() for b in _blocks(doc)) / max(1, line)
        frame = 2 * self.edit.frameWidth() + int(doc.documentMargin() * 2) + 4
        want = int(min(max(lines, 1), EDIT_MAX_LINES) * line) + frame
        self.edit.setFixedHeight(max(EDIT_MIN_HEIGHT, want))

    def set_streaming(self, streaming: bool) -> None:
        self.send_button.setVisible(not streaming)
        self.stop_button.setVisible(streaming)

    def set_can_send(self, can: bool, why: str = "") -> None:
        self._can_send = can
        self.send_button.setEnabled(can)
        self.send_button.setToolTip(why)

    def _submit(self) -> None:
        typed = self.edit.toPlainText()
        if not typed.strip() or not self._can_send or self.stop_button.isVisible():
            return
        self.edit.clear()
        self.sendRequested.emit(message_text(typed))


def message_text(typed: str) -> str:
    """What is sent of the composer's text: without leading blank lines and trailing whitespace, but with the
    first line's indentation (a pasted code block starts indented, and its indentation is its meaning)."""
    lines = typed.rstrip().split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    return "\n".join(lines)


def _blocks(doc):
    block = doc.begin()
    while block.isValid():
        yield block
        block = block.next()
