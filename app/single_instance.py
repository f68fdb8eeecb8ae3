"""One app instance per data folder: a second launch asks the first to show its window, then exits.

Two parts, because each alone is not enough:
- a QLockFile in the data folder decides ownership (stale locks of a dead process are taken over, by pid);
- a QLocalServer named after the folder lets a second launch reach the owner ("show" -> `activated`).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from PySide6.QtCore import QLockFile, QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

LOCK_NAME = "halo-chat.lock"
_SHOW = b"show\n"


def server_name(data_folder: Path) -> str:
    digest = hashlib.sha256(str(Path(data_folder).resolve()).encode("utf-8")).hexdigest()[:16]
    return f"halo-chat-{digest}"


class SingleInstance(QObject):
    activated = Signal()      # another launch asked this instance to show itself

    def __init__(self, data_folder: Path, parent: QObject | None = None):
        super().__init__(parent)
        self.data_folder = Path(data_folder)
        self.data_folder.mkdir(parents=True, exist_ok=True)
        self._lock = QLockFile(str(self.data_folder / LOCK_NAME))
        self._lock.setStaleLockTime(0)       # stale only when its process is gone, never by age
        self._server: QLocalServer | None = None

    def acquire(self) -> bool:
        """True: this process owns the data folder and listens for later launches."""
        if not self._lock.tryLock(0):
            return False
        name = server_name(self.data_folder)
        QLocalServer.removeServer(name)          # a crashed owner's leftover socket (we hold the lock)
        self._server = QLocalServer(self)
        self._server.newConnection.connect(self._on_connection)
        self._server.listen(name)
        return True

    def notify_owner(self, timeout_ms: int = 2000) -> bool:
        """From the second launch: ask the owner to show its window. False if it could not be reached."""
        socket = QLocalSocket()
        socket.connectToServer(server_name(self.data_folder))
        if not socket.waitForConnected(timeout_ms):
            return False
        socket.write(_SHOW)
        ok = socket.waitForBytesWritten(timeout_ms)
        socket.disconnectFromServer()
        return ok

    def release(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        self._lock.unlock()

    def _on_connection(self) -> None:
        """A later launch connected: it writes its request right after connecting, so a short blocking
        read here (GUI thread, only when a second launch happens) keeps this free of per-socket slots."""
        while self._server is not None and (socket := self._server.nextPendingConnection()) is not None:
            if socket.bytesAvailable() or socket.waitForReadyRead(1000):
                if bytes(socket.readAll().data()).startswith(_SHOW.strip()):
                    self.activated.emit()
            socket.abort()
            socket.deleteLater()


def bring_to_front(window) -> None:
    from PySide6.QtCore import Qt

    if window.isMinimized():
        window.setWindowState(window.windowState() & ~Qt.WindowState.WindowMinimized)
    window.show()
    window.raise_()
    window.activateWindow()
