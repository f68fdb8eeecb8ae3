"""The scrolling list of messages of one conversation. Follows the bottom while a reply streams, unless
the user has scrolled up to read."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QScrollArea, QSizePolicy, QVBoxLayout, QWidget

from app.widgets.message_view import MessageView

MAX_TEXT_WIDTH = 860


class ChatView(QScrollArea):
    regenerateRequested = Signal(int)   # message id
    continueRequested = Signal(int)     # message id of a reply cut off by the token limit
    deleteRequested = Signal(int)       # message id
    editRequested = Signal(int)         # message id of a user message
    alternativeRequested = Signal(int, int)   # message id, step

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("ChatArea")
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # A centred column at most MAX_TEXT_WIDTH wide: long lines stay readable on wide windows.
        inner = QWidget()
        row = QHBoxLayout(inner)
        row.setContentsMargins(24, 16, 24, 16)
        self._column_widget = QWidget()
        self._column_widget.setMaximumWidth(MAX_TEXT_WIDTH)
        self._column_widget.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        row.addStretch(0)
        row.addWidget(self._column_widget, 1)
        row.addStretch(0)
        self._column = QVBoxLayout(self._column_widget)
        self._column.setContentsMargins(0, 0, 0, 0)
        self._column.setSpacing(12)
        self._column.addStretch(1)
        self.setWidget(inner)
        self._views: dict[int, MessageView] = {}
        self._follow = True
        self.verticalScrollBar().rangeChanged.connect(self._on_range_changed)
        self.verticalScrollBar().valueChanged.connect(self._on_scrolled)

        self.empty = QWidget()
        self.empty.setObjectName("EmptyState")
        e = QVBoxLayout(self.empty)
        e.setContentsMargins(0, 60, 0, 0)
        self.empty_title = QLabel("Start a conversation")
        self.empty_title.setObjectName("EmptyTitle")
        self.empty_title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_hint = QLabel("Type a message below. Enter sends, Shift+Enter starts a new line.")
        self.empty_hint.setObjectName("Muted")
        self.empty_hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_hint.setWordWrap(True)
        e.addWidget(self.empty_title)
        e.addWidget(self.empty_hint)
        self._column.insertWidget(0, self.empty)

    # -- content ----------------------------------------------------------------------------------
    def clear(self) -> None:
        for view in self._views.values():
            view.setParent(None)
            view.deleteLater()
        self._views.clear()
        self.empty.setVisible(True)
        self._follow = True

    def add_message(self, message_id: int, role: str, text: str, state: str = "complete",
                    detail: str = "", reasoning: str = "") -> MessageView:
        view = MessageView(message_id, role, text, state, detail, parent=self._column_widget)
        if reasoning:
            view.set_reasoning(reasoning)
        view.regenerateRequested.connect(self.regenerateRequested)
        view.continueRequested.connect(self.continueRequested)
        view.deleteRequested.connect(self.deleteRequested)
        view.editRequested.connect(self.editRequested)
        view.alternativeRequested.connect(self.alternativeRequested)
        self._column.insertWidget(self._column.count() - 1, view)
        self._views[message_id] = view
        self.empty.setVisible(False)
        # only the new view and the one it follows change: a chat of n messages loads in O(n) widget calls
        self._update_regenerate_buttons(list(self._views.values())[-2:])
        return view

    def remove_message(self, message_id: int) -> None:
        view = self._views.pop(message_id, None)
        if view is not None:
            view.setParent(None)
            view.deleteLater()
        self.empty.setVisible(not self._views)
        self._update_regenerate_buttons()

    def view(self, message_id: int) -> MessageView | None:
        return self._views.get(message_id)

    def views(self) -> list[MessageView]:
        return list(self._views.values())

    def set_busy(self, busy: bool) -> None:
        self._busy = busy
        self._update_regenerate_buttons()

    def _update_regenerate_buttons(self, views: list[MessageView] | None = None) -> None:
        """The actions of `views` (default: all). Only the last reply can be regenerated (no silent loss of later
        messages), and not mid-stream."""
        busy = getattr(self, "_busy", False)
        last_view = next(reversed(self._views.values()), None)
        views = list(self._views.values()) if views is None else views
        for v in views:
            if v.role == "assistant":
                last = v is last_view
                v.regenerate_button.setVisible(last and not busy)
                v.set_regenerate_enabled(last and not busy)
                v.continue_button.setVisible(last and not busy and v.can_continue())
        for v in views:
            v.delete_button.setEnabled(not (busy and v.state == "streaming"))
            for b in (v.edit_button, v.prev_button, v.next_button):
                b.setEnabled(not busy)                 # the path must not change under a reply being written

    def refresh_actions(self) -> None:
        self._update_regenerate_buttons()

    # -- following the bottom ---------------------------------------------------------------------
    def _on_scrolled(self, value: int) -> None:
        bar = self.verticalScrollBar()
        self._follow = value >= bar.maximum() - 24

    def _on_range_changed(self, _min: int, maximum: int) -> None:
        if self._follow:
            self.verticalScrollBar().setValue(maximum)

    def scroll_to_bottom(self) -> None:
        self._follow = True
        self.verticalScrollBar().setValue(self.verticalScrollBar().maximum())
