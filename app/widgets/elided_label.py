"""A QLabel (and a QPushButton) that never widens its window: long text is cut with "…" to the width it is given, and the
whole text stays in the tooltip (unless a tooltip was set on purpose)."""
from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QLabel, QPushButton, QSizePolicy, QStyle

from app.widgets.plain_text import plain_tooltip


class ElidedLabel(QLabel):
    MIN_CHARS = 6        # the narrowest it gets: about this many characters

    def __init__(self, text: str = "", parent=None):
        super().__init__(parent)
        self._full = ""
        self._own_tooltip = False
        # Preferred: as wide as the whole text when there is room, down to minimumSizeHint (MIN_CHARS) when not.
        # (Ignored would let a layout squeeze it to 0 px: the text set but nothing shown.)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.setTextFormat(Qt.TextFormat.PlainText)     # chat titles, model names: untrusted (plain_text)
        self.setText(text)

    def setText(self, text: str) -> None:   # noqa: N802 - Qt's name
        self._full = text or ""
        if not self._own_tooltip:
            super().setToolTip(plain_tooltip(self._full) if self._elided() != self._full else "")
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
            QLabel.setToolTip(self, plain_tooltip(self._full) if shown != self._full else "")


class ElidedButton(QPushButton):
    """A push button whose long text (a model's name) is cut with "…" in the middle to the width it gets (at
    most `max_width` pixels, as little as MIN_WIDTH when the window is narrow), so it never widens its window;
    the whole text is in the tooltip (else the tooltip set on it)."""

    MIN_WIDTH = 80

    def __init__(self, text: str = "", max_width: int = 320, parent=None):
        super().__init__(parent)
        self.setMaximumWidth(max_width)
        self.setMinimumWidth(self.MIN_WIDTH)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self._full, self._hint = "", ""
        self.setText(text)

    def setText(self, text: str) -> None:   # noqa: N802 - Qt's name
        self._full = text or ""
        self._elide(self.maximumWidth() if not self.isVisible() else self.width())
        self.updateGeometry()

    def _elide(self, width: int) -> None:
        room = width - 2 * self.style().pixelMetric(QStyle.PixelMetric.PM_ButtonMargin) - 12
        super().setText(self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideMiddle, max(20, room)))
        self._update_tip()

    def sizeHint(self) -> QSize:               # the whole text's width, up to the maximum
        hint = super().sizeHint()
        full = self.fontMetrics().horizontalAdvance(self._full) + 28
        return QSize(min(self.maximumWidth(), max(hint.width(), full)), hint.height())

    def minimumSizeHint(self) -> QSize:
        return QSize(self.MIN_WIDTH, super().minimumSizeHint().height())

    def resizeEvent(self, event):
        super().resizeEvent(event)
        self._elide(self.width())

    def setToolTip(self, tip: str) -> None:   # noqa: N802 - Qt's name
        self._hint = tip
        self._update_tip()

    def _update_tip(self) -> None:
        super().setToolTip(plain_tooltip(self._full) if self.shown_text() != self._full else self._hint)

    def text(self) -> str:                   # the whole text, as set
        return self._full

    def shown_text(self) -> str:
        return super().text()
