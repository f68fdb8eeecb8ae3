"""One message in the chat: who said it, its Markdown text, its state, and Copy / Regenerate actions."""
from __future__ import annotations

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QFontDatabase,
    QGuiApplication,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
)
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QSizePolicy, QTextBrowser, QToolButton, QVBoxLayout

from app.theme import current_colors

STATE_TEXT = {
    "interrupted": "Interrupted: the app stopped while this reply was being written",
    "stopped": "Stopped",
    "error": "Failed",
    "streaming": "",
    "complete": "",
}


class MarkdownView(QTextBrowser):
    """A read-only Markdown view as tall as its content (the chat scroll area does the scrolling)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("MessageBody")
        self.setOpenExternalLinks(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.document().setDocumentMargin(2)
        self._markdown = ""

    def set_markdown(self, text: str) -> None:
        if text == self._markdown:
            return
        self._markdown = text
        self.setMarkdown(text)
        self._style_code_blocks()
        self._fit_height()

    def markdown(self) -> str:
        return self._markdown

    def _style_code_blocks(self) -> None:
        # Qt's Markdown importer marks fenced/indented code blocks; give them a monospace font and a tint.
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        tint = QColor(current_colors().get("code_bg", "#f3f4f6"))
        doc = self.document()
        block = doc.begin()
        while block.isValid():
            fmt = block.blockFormat()
            if fmt.hasProperty(QTextBlockFormat.Property.BlockCodeFence) or fmt.nonBreakableLines():
                cursor = QTextCursor(block)
                bfmt = QTextBlockFormat()
                bfmt.setBackground(tint)
                bfmt.setLeftMargin(6)
                bfmt.setNonBreakableLines(False)   # wrap long code lines rather than clip them
                cursor.mergeBlockFormat(bfmt)
                cursor.select(QTextCursor.SelectionType.BlockUnderCursor)
                cfmt = QTextCharFormat()
                cfmt.setFont(mono)
                cursor.mergeCharFormat(cfmt)
            block = block.next()

    def _fit_height(self) -> None:
        doc = self.document()
        doc.setTextWidth(max(50, self.viewport().width()))
        m = self.contentsMargins()
        height = int(doc.documentLayout().documentSize().height()) + m.top() + m.bottom() + 6
        if height != self.height():
            self.setFixedHeight(height)

    def resizeEvent(self, event):
        super().resizeEvent(event)
        self._fit_height()

    def sizeHint(self) -> QSize:
        return QSize(400, int(self.document().size().height()) + 4)


class ThinkingSection(QFrame):
    """A reply's reasoning above its answer: one header button, collapsed by default (the answer is what
    people read), expanded by a click; hidden while there is no reasoning. Streams live like the answer."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("Thinking")
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.setSpacing(2)
        self.toggle = QToolButton(self)
        self.toggle.setObjectName("Flat")
        self.toggle.setCheckable(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.setCursor(Qt.CursorShape.PointingHandCursor)
        self.toggle.setToolTip("Show or hide the model's reasoning")
        self.toggle.toggled.connect(self.set_expanded)
        col.addWidget(self.toggle)
        self.body = MarkdownView(self)
        self.body.setObjectName("ThinkingBody")
        self.body.setVisible(False)
        col.addWidget(self.body)
        self._streaming = False
        self.setVisible(False)

    def set_reasoning(self, text: str, streaming: bool = False) -> None:
        self._streaming = streaming
        self.body.set_markdown(text)
        self.setVisible(bool(text))
        words = len(text.split())
        self.toggle.setText("Thinking…" if streaming else f"Thinking ({words:,} words)")

    def reasoning(self) -> str:
        return self.body.markdown()

    def is_expanded(self) -> bool:
        return self.body.isVisible()

    def set_expanded(self, expanded: bool) -> None:
        self.toggle.setChecked(expanded)
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if expanded else Qt.ArrowType.RightArrow)
        self.body.setVisible(expanded)


class MessageView(QFrame):
    """`message_id` is the store's row id; the chat view addresses updates with it."""

    copyRequested = Signal(int)
    regenerateRequested = Signal(int)

    def __init__(self, message_id: int, role: str, text: str = "", state: str = "complete",
                 detail: str = "", parent=None):
        super().__init__(parent)
        self.message_id = message_id
        self.role = role
        self.setObjectName("Message")
        self.setProperty("role", role)
        # Expanding: the chat column centres messages and lets them grow to its maximum width.
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(14, 10, 14, 8)
        outer.setSpacing(4)

        head = QHBoxLayout()
        head.setSpacing(6)
        who = QLabel("You" if role == "user" else "Assistant")
        who.setObjectName("MessageRole")
        head.addWidget(who)
        self.state_badge = QLabel()
        self.state_badge.setObjectName("StateBadge")
        head.addWidget(self.state_badge)
        head.addStretch(1)
        self.detail_label = QLabel()
        self.detail_label.setObjectName("Muted")
        head.addWidget(self.detail_label)
        self.copy_button = _flat_button("Copy", "Copy this message as Markdown")
        self.copy_button.clicked.connect(self._copy)
        head.addWidget(self.copy_button)
        self.regenerate_button = _flat_button("Regenerate", "Write this reply again")
        self.regenerate_button.clicked.connect(lambda: self.regenerateRequested.emit(self.message_id))
        head.addWidget(self.regenerate_button)
        outer.addLayout(head)
        # Only after the button has a parent: showing a parentless widget opens a window of its own.
        self.regenerate_button.setVisible(role == "assistant")

        self.thinking = ThinkingSection(self)
        outer.addWidget(self.thinking)
        self.body = MarkdownView(self)
        outer.addWidget(self.body)
        self.set_text(text)
        self.set_state(state, detail)

    def set_reasoning(self, text: str) -> None:
        """The reply's reasoning so far ("Thinking…" while the reply streams)."""
        self.thinking.set_reasoning(text, streaming=self.state == "streaming")

    def text(self) -> str:
        return self.body.markdown()

    def set_text(self, text: str) -> None:
        # While streaming an empty reply, show a quiet ellipsis so the row does not look broken.
        self.body.set_markdown(text)

    def set_state(self, state: str, detail: str = "") -> None:
        self.state = state
        label = STATE_TEXT.get(state, state)
        if state == "error" and detail:
            label = f"Failed: {detail.splitlines()[0]}"
        self.state_badge.setText(label)
        self.state_badge.setVisible(bool(label))
        self.state_badge.setToolTip(detail)
        self.detail_label.setText("writing…" if state == "streaming" else "")
        if hasattr(self, "thinking") and self.thinking.reasoning():
            self.thinking.set_reasoning(self.thinking.reasoning(), streaming=state == "streaming")

    def set_detail(self, text: str) -> None:
        self.detail_label.setText(text)

    def set_regenerate_enabled(self, enabled: bool) -> None:
        self.regenerate_button.setEnabled(enabled)

    def _copy(self) -> None:
        QGuiApplication.clipboard().setText(self.text())
        self.copyRequested.emit(self.message_id)


def _flat_button(text: str, tip: str) -> QToolButton:
    b = QToolButton()
    b.setObjectName("Flat")
    b.setText(text)
    b.setToolTip(tip)
    b.setCursor(Qt.CursorShape.PointingHandCursor)
    return b
