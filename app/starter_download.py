"""Downloading the starter model: a progress dialog whose Cancel really stops the download (nothing is
kept), and a failure said in words with Retry."""
from __future__ import annotations

import threading

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QProgressDialog

from app.library import human_size
from engine import model_store
from engine.errors import DownloadCancelled


class StarterFetch(QObject):
    """engine.model_store.fetch on a thread; progress and the outcome come back as signals (queued to the
    GUI thread). `cancel()`: any thread; the fetch stops at its next chunk and `cancelled` follows."""

    progress = Signal(float, str)
    done = Signal(str)
    failed = Signal(object)
    cancelled = Signal()

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._cancel = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._run, name="starter-fetch", daemon=True).start()

    def cancel(self) -> None:
        self._cancel.set()

    def _run(self) -> None:
        def report(done: int, total: int, what: str) -> None:
            self.progress.emit(done / total if total else 0.0, f"Downloading {what}: {human_size(done)}")

        try:
            self.done.emit(str(model_store.fetch(model_store.STARTER, progress=report, cancel=self._cancel)))
        except DownloadCancelled:
            self.cancelled.emit()
        except Exception as e:   # noqa: BLE001 - shown in the window
            self.failed.emit(e)


class StarterDownload(QObject):
    """One download at a time, for the window's model actions (`actions`: open_path, offer_starter, ...)."""

    def __init__(self, actions, window):
        super().__init__(window)
        self.actions, self.w = actions, window
        self.fetcher: StarterFetch | None = None
        self.dialog: QProgressDialog | None = None

    def start(self) -> None:
        if self.fetcher is not None:
            return
        self.w.banner.hide()
        self.w._sync_banner_holder()
        fetcher = StarterFetch(self)
        dlg = QProgressDialog("Downloading the starter model…", "Cancel download", 0, 1000, self.w)
        dlg.setWindowTitle("Starter model")
        dlg.setWindowModality(Qt.WindowModality.WindowModal)
        dlg.setMinimumDuration(0)
        dlg.setAutoClose(False)
        dlg.canceled.connect(fetcher.cancel)           # the button stops the download, not just the dialog
        fetcher.progress.connect(lambda f, what: (dlg.setValue(int(f * 1000)), dlg.setLabelText(what)))
        fetcher.done.connect(self._done)
        fetcher.failed.connect(self._failed)
        fetcher.cancelled.connect(self._cancelled)
        self.fetcher, self.dialog = fetcher, dlg
        fetcher.start()

    def _finish(self) -> None:
        if self.dialog is not None:
            self.dialog.canceled.disconnect()
            self.dialog.close()
        self.fetcher, self.dialog = None, None

    def _done(self, path: str) -> None:
        self._finish()
        self.actions.open_path(path)

    def _cancelled(self) -> None:
        self._finish()
        self.w.status.flash("The starter model download was cancelled; nothing was kept")
        self.actions.offer_starter()

    def _failed(self, error: Exception) -> None:
        self._finish()
        self.w.show_banner("The starter model could not be downloaded",
                           f"{error}\n\nNothing was kept. You can also open a GGUF file you already have.",
                           (("Retry", self.start), ("Open GGUF…", self.actions.open_file_dialog)))
