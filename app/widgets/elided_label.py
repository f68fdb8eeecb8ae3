"""A QLabel that never widens its window: long text is cut with "…" to the width it is given, and the
whole text stays in the tooltip (unless a tooltip was set on purpose)."""
from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QLabel, QSizePolicy


class ElidedLabel(QLabel):
    MIN_CHARS = 6        # the narrowest it gets: about this many characters

    def __init__(self, text: str = "", parent=None):
        super().__init__(parent)
        self._full = ""
        self._own_tooltip = False
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setText(text)

    def setText(self, text: str) -> None:   # noqa: N802 - Qt's name
        self._full = text or ""
        if not self._own_tooltip:
            super().setToolTip(self._full if self._elided() != self._full else "")
        self._refresh()

    def text(self) -> str:                  # the whole text, as set
        return self._full

    def shown_text(self) -> str:
        return super().text()

    def setToolTip(self, tip: str) -> None:  # noqa: N802
        self._own_tooltip = bool(tip)
        super().setToolTip(tip)

    def sizeHint(self) -> QSize:            # noqa: N802
        fm = self.fontMetrics()
        return QSize(fm.horizontalAdvance(self._full) + 4, super().sizeHint().height())

    def minimumSizeHint(self) -> QSize:     # noqa: N802
        return QSize(min(self.sizeHint().width(), self.fontMetrics().averageCharWidth() * self.MIN_CHARS),
                     super().minimumSizeHint().height())

    def resizeEvent(self, event) -> None:   # noqa: N802
        super().resizeEvent(event)
        self._refresh()

    def _elided(self) -> str:
        return self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, max(0, self.width() - 2))

    def _refresh(self) -> None:
        shown = self._elided() if self.width() > 0 else self._full
        if shown != super().text():
            super().setText(shown)
        if not self._own_tooltip:
            QLabel.setToolTip(self, self._full if shown != self._full else "")
