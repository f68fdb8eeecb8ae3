"""The model-loading strip: what is loading, how far, and Cancel."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar, QPushButton


class LoadBar(QFrame):
    cancelRequested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("LoadBar")
        row = QHBoxLayout(self)
        row.setContentsMargins(16, 6, 16, 6)
        self.label = QLabel()
        self.label.setTextFormat(Qt.TextFormat.PlainText)   # "Loading <the file's name>" (plain_text)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(False)
        self.bar.setFixedHeight(8)
        self.cancel_button = QPushButton("Cancel  (Esc)")
        self.cancel_button.setToolTip("Stop loading: Esc, anywhere in the window (the model you had stays)")
        self.cancel_button.clicked.connect(self.cancelRequested)
        row.addWidget(self.label, 2)
        row.addWidget(self.bar, 3)
        row.addWidget(self.cancel_button)
        self.hide()

    def start(self, what: str, estimate: str = "") -> None:
        self._what = what
        self._estimate = estimate
        self.label.setText(f"Loading {what}" + (f" (about {estimate})" if estimate else "") + "…")
        self.bar.setValue(0)
        self.show()

    def set_progress(self, fraction: float, message: str) -> None:
        self.bar.setValue(int(max(0.0, min(1.0, fraction)) * 1000))
        if message:
            self.label.setText(f"Loading {self._what}: {message}")
