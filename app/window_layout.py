"""How the window fits the screen: a default size that fits, the size, place and sidebar width of last time,
a sidebar that folds away (by hand, or by itself below AUTO_COLLAPSE_WIDTH), a stop shortcut that works wherever
the focus is, and dialogs that scroll when the screen is short."""
from __future__ import annotations

from PySide6.QtCore import QByteArray, QEvent, QObject, QSize
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import QDialog, QFrame, QScrollArea, QSplitter, QVBoxLayout, QWidget

PREFERRED_SIZE = QSize(1180, 760)
SCREEN_SHARE = 0.9                 # the default window takes at most this much of the available screen
AUTO_COLLAPSE_WIDTH = 700          # narrower than this, the sidebar folds away (until widened again)
STOP_SHORTCUT = "Esc"


def fit_to_screen(window: QWidget, preferred: QSize = PREFERRED_SIZE) -> None:
    screen = window.screen() or QGuiApplication.primaryScreen()
    if screen is None:
        window.resize(preferred)
        return
    avail = screen.availableGeometry()
    window.resize(min(preferred.width(), int(avail.width() * SCREEN_SHARE)),
                  min(preferred.height(), int(avail.height() * SCREEN_SHARE)))


class LayoutMemory(QObject):
    """The window's size and place (maximized too) and the sidebar's width: saved as the window closes, given
    back at the next start. Qt's restoreGeometry brings a window saved on a monitor that is gone now back onto
    a screen; what it cannot read (a hand-edited file) leaves fit_to_screen's default."""

    GEOMETRY, SIDEBAR_WIDTH = "window/geometry", "window/sidebar_width"

    def __init__(self, window: QWidget, splitter: QSplitter, settings):
        super().__init__(window)
        self.window, self.splitter, self.settings = window, splitter, settings
        self._restore()
        window.installEventFilter(self)

    def _restore(self) -> None:
        geometry = self.settings.q.value(self.GEOMETRY)
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            self.window.restoreGeometry(geometry)
        width = self.settings.int_value(self.SIDEBAR_WIDTH, 0)
        if 0 < width < self.window.width():
            # the splitter is not laid out yet: its sizes share out the window's width
            self.splitter.setSizes([width, self.window.width() - width - self.splitter.handleWidth()])

    def save(self) -> None:
        self.settings.q.setValue(self.GEOMETRY, self.window.saveGeometry())
        sidebar = self.splitter.widget(0)
        if sidebar.isVisible():          # folded away (Ctrl+B, a narrow window), it keeps the width it had
            self.settings.q.setValue(self.SIDEBAR_WIDTH, sidebar.width())

    def eventFilter(self, obj, event) -> bool:   # noqa: N802 - Qt's name
        if obj is self.window and event.type() == QEvent.Type.Close:
            self.save()
        return False


class SidebarFolding(QObject):
    """View > Show sidebar (Ctrl+B), and the automatic fold on a narrow window. A choice made by hand wins
    until the window crosses AUTO_COLLAPSE_WIDTH again."""

    def __init__(self, window: QWidget, sidebar: QWidget, menu):
        super().__init__(window)
        self.window, self.sidebar = window, sidebar
        self.action = QAction("Show sidebar", window, checkable=True, checked=True)
        self.action.setShortcut(QKeySequence("Ctrl+B"))
        self.action.toggled.connect(self.sidebar.setVisible)
        menu.addAction(self.action)
        window.addAction(self.action)
        self._narrow = False
        window.installEventFilter(self)

    def set_visible(self, visible: bool) -> None:
        self.action.setChecked(visible)

    def eventFilter(self, obj, event) -> bool:   # noqa: N802 - Qt's name
        if obj is self.window and event.type() == QEvent.Type.Resize:
            narrow = self.window.width() < AUTO_COLLAPSE_WIDTH
            if narrow != self._narrow:
                self._narrow = narrow
                self.set_visible(not narrow)
        return False


def make_scrollable(dialog: QDialog, content: QWidget, below: QWidget) -> QScrollArea:
    """Puts `content` in a scroll area above `below` (the buttons, always visible) and keeps the dialog
    no taller than the screen it opens on."""
    scroll = QScrollArea()
    scroll.setWidgetResizable(True)
    scroll.setFrameShape(QFrame.Shape.NoFrame)
    scroll.setWidget(content)
    col = QVBoxLayout(dialog)
    col.setContentsMargins(0, 0, 0, 8)
    col.addWidget(scroll, 1)
    col.addWidget(below)
    screen = dialog.screen() or QGuiApplication.primaryScreen()
    if screen is not None:
        avail = screen.availableGeometry()
        dialog.setMaximumHeight(int(avail.height() * SCREEN_SHARE))
        # open at the content's own size (no sideways scrolling), as far as the screen allows
        bar = scroll.verticalScrollBar().sizeHint().width()
        want = content.sizeHint()
        dialog.resize(min(want.width() + bar + 8, avail.width()),
                      min(want.height() + below.sizeHint().height() + 16, dialog.maximumHeight()))
    return scroll
