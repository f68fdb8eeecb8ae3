"""A dismissible message across the top of the chat: what happened, what to do, and buttons for it."""
from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout


class Banner(QFrame):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("Banner")
        row = QHBoxLayout(self)
        row.setContentsMargins(12, 8, 8, 8)
        text = QVBoxLayout()
        text.setSpacing(2)
        self.title = QLabel()
        self.title.setObjectName("BannerTitle")
        self.body = QLabel()
        for label in (self.title, self.body):       # they quote file names and servers' errors (plain_text)
            label.setTextFormat(Qt.TextFormat.PlainText)
        self.body.setWordWrap(True)
        self.body.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        text.addWidget(self.title)
        text.addWidget(self.body)
        row.addLayout(text, 1)
        self._actions = QHBoxLayout()
        row.addLayout(self._actions)
        self.dismiss_button = QPushButton("Dismiss")
        self.dismiss_button.clicked.connect(self.hide)
        row.addWidget(self.dismiss_button, 0, Qt.AlignmentFlag.AlignTop)
        self.hide()

    def show_message(self, title: str, body: str,
                     actions: tuple[tuple[str, Callable[[], None]], ...] = ()) -> None:
        self.title.setText(title)
        self.body.setText(body)
        while self._actions.count():
            w = self._actions.takeAt(0).widget()
            if w is not None:
                w.deleteLater()
        for label, slot in actions:
            b = QPushButton(label)
            b.clicked.connect(self.hide)
            b.clicked.connect(slot)
            self._actions.addWidget(b, 0, Qt.AlignmentFlag.AlignTop)
        self.show()

    def action_labels(self) -> list[str]:
        return [self._actions.itemAt(i).widget().text() for i in range(self._actions.count())]
