"""One message in the chat: who said it, its Markdown text, its state, and Copy / Regenerate actions."""
from __future__ import annotations

import functools

from PySide6.QtCore import QSize, Qt, QUrl, Signal
from PySide6.QtGui import (
    QColor,
    QDesktopServices,
    QFontDatabase,
    QGuiApplication,
    QImage,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
)
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QSizePolicy, QTextBrowser, QToolButton, QVBoxLayout

from app.code_highlight import highlight_spans
from app.markdown_prep import COPY_SCHEME, prepare
from app.theme import current_colors
from app.widgets.elided_label import ElidedLabel
from app.widgets.plain_text import plain_tooltip
from app.widgets.stream_pacer import StreamPacer

# While a reply streams, its Markdown is rendered at most every STREAM_RENDER_MS, and less often as renders get
# dearer (StreamPacer); a finished text is rendered at once.
STREAM_RENDER_MS = 150
# Links in a message that a click opens (in the browser); the rest are not followed
LINK_SCHEMES = frozenset({"http", "https"})
MARKDOWN_FEATURES = QTextDocument.MarkdownFeature(QTextDocument.MarkdownFeature.MarkdownDialectGitHub.value
                                                  | QTextDocument.MarkdownFeature.MarkdownNoHTML.value)
TRUNCATED_TEXT = "Cut off at the token limit"
STATE_TEXT = {
    "interrupted": "Interrupted: the app stopped while this reply was being written",
    "stopped": "Stopped",
    "error": "Failed",
    "streaming": "",
    "complete": "",
}


@functools.cache
def _blank_pixel() -> QImage:
    image = QImage(1, 1, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    return image


class MarkdownView(QTextBrowser):
    """A read-only Markdown view as tall as its content (the chat scroll area does the scrolling).

    Code blocks get a tinted background that stands out in both themes and in a user bubble (`code_bg` /
    `code_bg_user` of the theme), Pygments colours by their language, and a "Copy code" link each."""

    codeCopied = Signal(int)     # index of the code block copied

    def __init__(self, parent=None, code_bg: str = "code_bg"):
        super().__init__(parent)
        self.setObjectName("MessageBody")
        self.setOpenLinks(False)                     # links are handled: Copy code here, others by the OS
        self.anchorClicked.connect(self._on_anchor)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.document().setDocumentMargin(2)
        self._markdown = ""
        self._code_bg = code_bg
        self.code_blocks: tuple[tuple[str, str], ...] = ()
        self.render_count = 0                        # how often the Markdown was parsed (throttling is tested)

    def set_markdown(self, text: str) -> None:
        if text == self._markdown:
            return
        self._markdown = text
        prepared = prepare(text)
        self.code_blocks = prepared.blocks
        # Model output is untrusted: raw HTML stays text ("List<String>", "<div>" were swallowed with the rest of
        # their paragraph, and tags were obeyed), and resources are never loaded (loadResource)
        self.document().setMarkdown(prepared.markdown, MARKDOWN_FEATURES)
        self.render_count += 1
        self._style_code_blocks()
        self._fit_height()

    def markdown(self) -> str:
        return self._markdown

    def loadResource(self, kind: int, name: QUrl):  # noqa: N802 - Qt's name
        """A blank pixel for every resource: an image in a reply (`![x](/dev/zero)`, a FIFO, any local file) would be
        read on the GUI thread from a path the model chose. (No answer, or data that is no image, and Qt's image
        handler opens the file itself.)"""
        return _blank_pixel()

    def _on_anchor(self, url: QUrl) -> None:
        if url.scheme() == COPY_SCHEME:
            index = int(url.path()) if url.path().isdigit() else -1
            if 0 <= index < len(self.code_blocks):
                QGuiApplication.clipboard().setText(self.code_blocks[index][1])
                self.codeCopied.emit(index)
        elif url.scheme().lower() in LINK_SCHEMES:
            QDesktopServices.openUrl(url)
        # any other scheme (file:, javascript:, ms-settings:, smb:, an app's own handler...) is not followed: the
        # model wrote the link, and the OS would run what it points at

    def _style_code_blocks(self) -> None:
        # One edit block for all the format changes: the document is laid out once at its end. Edited one by
        # one, each line's and each token's change laid the whole document out again (quadratic in its size).
        editing = QTextCursor(self.document())
        editing.beginEditBlock()
        try:
            self._style_code_blocks_in_edit()
        finally:
            editing.endEditBlock()

    def _style_code_blocks_in_edit(self) -> None:
        # Qt's Markdown importer marks fenced/indented code blocks: tint them, use a monospace font, and
        # colour each block's text by Pygments tokens of its language.
        colors = current_colors()
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        tint = QColor(colors.get(self._code_bg, colors.get("code_bg", "#e4e8ee")))
        doc = self.document()
        block = doc.begin()
        group: list = []
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
                group.append(block)
            elif group:
                self._highlight(group)
                group = []
            block = block.next()
        if group:
            self._highlight(group)

    def _highlight(self, blocks: list) -> None:
        language = blocks[0].blockFormat().stringProperty(QTextFormat.Property.BlockCodeLanguage)
        for start, length, color in highlight_spans("\n".join(b.text() for b in blocks), language,
                                                    dark=QColor(current_colors().get("bg", "#ffffff")).lightness() < 128):
            cursor = QTextCursor(self.document())
            cursor.setPosition(blocks[0].position() + start)
            cursor.setPosition(blocks[0].position() + start + length, QTextCursor.MoveMode.KeepAnchor)
            cfmt = QTextCharFormat()
            cfmt.setForeground(QColor(color))
            cursor.mergeCharFormat(cfmt)

    def _fit_height(self) -> None:
        doc = self.document()
        width = max(50, self.viewport().width())
        if doc.textWidth() != width:        # setting it lays the whole document out again, even when unchanged
            doc.setTextWidth(width)
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
        self._text = ""
        # Open while streaming, it is rendered at the answer's pace (it was re-rendered whole for every delta)
        self._pacer = StreamPacer(self.body.set_markdown, STREAM_RENDER_MS, self)
        self.setVisible(False)

    def set_reasoning(self, text: str, streaming: bool = False) -> None:
        self._streaming = streaming
        self._text = text
        if not streaming:
            self._pacer.discard()
            self.body.set_markdown(text)
        elif self.is_expanded():                    # collapsed while streaming: parsed when opened
            self._pacer.submit(text)
        self.setVisible(bool(text))
        words = len(text.split())
        self.toggle.setText("Thinking…" if streaming else f"Thinking ({words:,} words)")

    def reasoning(self) -> str:
        return self._text

    def is_expanded(self) -> bool:
        return self.body.isVisible()

    def set_expanded(self, expanded: bool) -> None:
        self.toggle.setChecked(expanded)
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if expanded else Qt.ArrowType.RightArrow)
        self._pacer.discard()                       # opened: rendered now; closed: not needed
        if expanded:
            self.body.set_markdown(self._text)
        self.body.setVisible(expanded)


class MessageView(QFrame):
    """`message_id` is the store's row id; the chat view addresses updates with it."""

    copyRequested = Signal(int)
    regenerateRequested = Signal(int)
    continueRequested = Signal(int)
    deleteRequested = Signal(int)
    editRequested = Signal(int)
    alternativeRequested = Signal(int, int)     # message id, step (-1 previous, +1 next)

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
        head.addStretch(1)
        # The state badge and the detail (speed, prompt progress) have a row of their own under the header: in
        # the header's row the buttons left them a few pixels at 640 px. Elided: never widen a narrow window.
        self.state_badge = ElidedLabel()
        self.state_badge.setObjectName("StateBadge")
        self.detail_label = ElidedLabel()
        self.detail_label.setObjectName("Muted")
        notes = QHBoxLayout()
        notes.setSpacing(6)
        notes.addWidget(self.state_badge)
        notes.addStretch(1)
        notes.addWidget(self.detail_label)
        self.copy_button = _flat_button("Copy", "Copy this message as Markdown")
        self.copy_button.clicked.connect(self._copy)
        head.addWidget(self.copy_button)
        self.regenerate_button = _flat_button("Regenerate", "Write this reply again")
        self.regenerate_button.clicked.connect(lambda: self.regenerateRequested.emit(self.message_id))
        head.addWidget(self.regenerate_button)
        self.continue_button = _flat_button("Continue", "Go on writing this reply where it was cut off")
        self.continue_button.clicked.connect(lambda: self.continueRequested.emit(self.message_id))
        head.addWidget(self.continue_button)
        self.prev_button = _flat_button("‹", "Previous alternative")
        self.prev_button.clicked.connect(lambda: self.alternativeRequested.emit(self.message_id, -1))
        self.alt_label = QLabel()
        self.alt_label.setObjectName("Muted")
        self.next_button = _flat_button("›", "Next alternative")
        self.next_button.clicked.connect(lambda: self.alternativeRequested.emit(self.message_id, 1))
        for w in (self.prev_button, self.alt_label, self.next_button):
            head.addWidget(w)
        self.edit_button = _flat_button("Edit", "Edit this message and send it again (the old turns stay as "
                                                "an alternative)")
        self.edit_button.clicked.connect(lambda: self.editRequested.emit(self.message_id))
        head.addWidget(self.edit_button)
        self.delete_button = _flat_button("Delete", "Delete this message from the conversation")
        self.delete_button.clicked.connect(lambda: self.deleteRequested.emit(self.message_id))
        head.addWidget(self.delete_button)
        outer.addLayout(head)
        outer.addLayout(notes)             # takes no room while both are hidden
        # Only after the button has a parent: showing a parentless widget opens a window of its own.
        self.regenerate_button.setVisible(role == "assistant")
        self.continue_button.setVisible(False)
        self.edit_button.setVisible(role == "user")
        self.truncated = False
        self.set_alternatives(1, 1)

        self.thinking = ThinkingSection(self)
        outer.addWidget(self.thinking)
        self.body = MarkdownView(self, code_bg="code_bg_user" if role == "user" else "code_bg")
        outer.addWidget(self.body)
        # While a reply streams, its Markdown is not re-parsed for every delta but at the pacer's rate (each render
        # costs in proportion to the text so far); the finished text is rendered at once.
        self._pacer = StreamPacer(self.body.set_markdown, STREAM_RENDER_MS, self)
        self.state = state
        self.set_text(text)
        self.set_state(state, detail)

    def set_reasoning(self, text: str) -> None:
        """The reply's reasoning so far ("Thinking…" while the reply streams)."""
        self.thinking.set_reasoning(text, streaming=self.state == "streaming")

    def set_text(self, text: str) -> None:
        if self.state == "streaming":
            self._pacer.submit(text)
        else:
            self._pacer.discard()
            self.body.set_markdown(text)

    def text(self) -> str:
        """The whole text, including what a paced stream has not rendered yet."""
        pending = self._pacer.pending()
        return pending if pending is not None else self.body.markdown()

    def set_state(self, state: str, detail: str = "") -> None:
        self.state = state
        if state != "streaming":
            self._pacer.flush()                 # a finished reply is rendered whole, at once
        label = STATE_TEXT.get(state, state)
        if state == "error" and detail:
            label = f"Failed: {detail.splitlines()[0]}"
        self.state_badge.setText(label)
        self.state_badge.setVisible(bool(label))
        self.state_badge.setToolTip(plain_tooltip(detail))      # a server's or the engine's words
        self.set_detail("writing…" if state == "streaming" else "")
        if hasattr(self, "thinking") and self.thinking.reasoning():
            self.thinking.set_reasoning(self.thinking.reasoning(), streaming=state == "streaming")

    def set_alternatives(self, position: int, count: int) -> None:
        """‹ position/count › when this message has alternatives (regenerated replies, edited messages)."""
        for w in (self.prev_button, self.alt_label, self.next_button):
            w.setVisible(count > 1)
        self.alt_label.setText(f"{position}/{count}")
        self.alternatives = (position, count)

    def set_truncated(self, truncated: bool) -> None:
        """A reply the token limit cut off: said in its badge; ChatView shows Continue on the last one."""
        self.truncated = truncated
        if truncated and self.state == "complete":
            self.state_badge.setText(TRUNCATED_TEXT)
            self.state_badge.setVisible(True)

    def can_continue(self) -> bool:
        """Continue goes on writing a reply that was cut off: by the token limit, by Stop (a model switch too)
        or by the app closing mid-reply. One with no text yet has nothing to go on from: Regenerate is for it."""
        cut = self.truncated or self.state in ("stopped", "interrupted")
        return self.role == "assistant" and cut and bool(self.text())

    def set_detail(self, text: str) -> None:
        self.detail_label.setText(text)
        self.detail_label.setVisible(bool(text))

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
