"""The sidebar: New chat, search (titles and message text), the list of conversations (rename / delete from its
menu, Delete from the keyboard)."""
from __future__ import annotations

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.store import Conversation
from app.widgets.plain_text import plain_tooltip

ID_ROLE = Qt.ItemDataRole.UserRole


class ConversationList(QWidget):
    selected = Signal(int)            # conversation id
    newRequested = Signal()
    renameRequested = Signal(int)
    deleteRequested = Signal(int)
    searchChanged = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("Sidebar")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        col = QVBoxLayout(self)
        col.setContentsMargins(10, 12, 10, 10)
        col.setSpacing(8)
        head = QHBoxLayout()
        title = QLabel("Halo Chat")
        title.setObjectName("AppTitle")
        head.addWidget(title)
        head.addStretch(1)
        col.addLayout(head)
        self.new_button = QPushButton("+  New chat")
        self.new_button.setObjectName("Primary")
        self.new_button.setToolTip("New conversation (Ctrl+N)")
        self.new_button.clicked.connect(self.newRequested)
        col.addWidget(self.new_button)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search chats")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self.searchChanged)
        col.addWidget(self.search)
        self.list = QListWidget()
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._menu)
        self.list.currentItemChanged.connect(self._current_changed)
        self.list.itemDoubleClicked.connect(lambda item: self.renameRequested.emit(item.data(ID_ROLE)))
        col.addWidget(self.list, 1)
        # Delete asks about the selected chat (the window's question defaults to Cancel), only while the list has
        # the focus: elsewhere the key edits text
        delete = QAction("Delete…", self.list, shortcut=QKeySequence(QKeySequence.StandardKey.Delete),
                         shortcutContext=Qt.ShortcutContext.WidgetShortcut)
        delete.triggered.connect(self._delete_current)
        self.list.addAction(delete)
        self._quiet = False

    def set_conversations(self, conversations: list[Conversation], current_id: int | None,
                          streaming_ids: set[int] = frozenset()) -> None:
        self._quiet = True
        try:
            self.list.clear()
            for conv in conversations:
                label = ("● " if conv.id in streaming_ids else "") + conv.title   # first: eliding keeps it
                item = QListWidgetItem(label)
                item.setData(ID_ROLE, conv.id)
                item.setToolTip(plain_tooltip(conv.title))
                self.list.addItem(item)
                if conv.id == current_id:
                    self.list.setCurrentItem(item)
        finally:
            self._quiet = False

    def current_id(self) -> int | None:
        item = self.list.currentItem()
        return item.data(ID_ROLE) if item else None

    def ids(self) -> list[int]:
        return [self.list.item(i).data(ID_ROLE) for i in range(self.list.count())]

    def select(self, conversation_id: int) -> None:
        for i in range(self.list.count()):
            if self.list.item(i).data(ID_ROLE) == conversation_id:
                self.list.setCurrentRow(i)
                return

    def step(self, offset: int) -> None:
        """Selects the chat `offset` rows away, round the ends (Ctrl+Tab, Ctrl+Shift+Tab)."""
        row = self.list.currentRow()
        if row < 0:                       # none selected (a search): forward starts at the top, back at the end
            row = 0 if offset < 0 else -1
        if self.list.count():
            self.list.setCurrentRow((row + offset) % self.list.count())

    def _delete_current(self) -> None:
        if (conv_id := self.current_id()) is not None:
            self.deleteRequested.emit(conv_id)

    def _current_changed(self, current: QListWidgetItem | None, _previous) -> None:
        if current is not None and not self._quiet:
            self.selected.emit(current.data(ID_ROLE))

    def _menu(self, pos: QPoint) -> None:
        item = self.list.itemAt(pos)
        if item is None:
            return
        conv_id = item.data(ID_ROLE)
        menu = QMenu(self)
        menu.addAction("Rename…", lambda: self.renameRequested.emit(conv_id))
        menu.addAction("Delete…", lambda: self.deleteRequested.emit(conv_id))
        menu.exec(self.list.viewport().mapToGlobal(pos))
