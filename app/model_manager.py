"""The library's state for the window: scans folders off the GUI thread and remembers each file's entry.

A scan thread never emits on the ModelLibrary itself: the window (and the library with it) may be gone by the
time a scan ends ("Signal source has been deleted" in the thread). It emits on a small carrier object of its
own, which its closure keeps alive; the carrier's queued connection to the library dies with the library."""
from __future__ import annotations

import os
import threading
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from app.library import ModelEntry, find_gguf_files, inspect_model, library_folders


class _Carrier(QObject):
    """One result from a worker thread to the GUI thread (made on the GUI thread, emitted from the worker)."""
    done = Signal(object)


class ModelLibrary(QObject):
    scanned = Signal(list)          # list[ModelEntry], sorted by file name
    inspected = Signal(object)      # one ModelEntry (for a single file: "Open GGUF…", drag and drop)

    def __init__(self, parent: QObject | None = None, extra_files=lambda: ()):
        """`extra_files()`: single files to list beside the folders' (opened or dropped ones)."""
        super().__init__(parent)
        self._extra_files = extra_files
        self.entries: list[ModelEntry] = []
        self._cache: dict[tuple[str, int, float], ModelEntry] = {}
        self._lock = threading.Lock()
        self._carriers: set[_Carrier] = set()     # in flight (each also held by its thread) until delivered
        self._scans_started = 0                   # scans are numbered: one that ends after a newer one is dropped
        self._newest_delivered = 0
        self.scanned.connect(self._remember)

    def scan(self, extra_folders: list[str]) -> None:
        """Non-blocking; `scanned` follows (queued to the GUI thread)."""
        folders = library_folders(extra_folders)
        self._scans_started += 1
        number = self._scans_started
        self._in_thread("library-scan", lambda: (number, self._inspect_all(folders)), self._scan_done)

    def scan_now(self, extra_folders: list[str]) -> list[ModelEntry]:
        """Blocking variant for the screenshot script (start-up uses `scan`: the window answers meanwhile)."""
        entries = self._inspect_all(library_folders(extra_folders))
        self._remember(entries)
        return entries

    def inspect(self, path: str) -> None:
        self._in_thread("library-inspect", lambda: self._inspect_one(Path(path)), self._inspect_done)

    def _in_thread(self, name: str, work, deliver) -> None:
        """Run `work()` on a daemon thread; `deliver((carrier, result))` runs on the GUI thread, unless this
        library was deleted meanwhile (then the result is dropped)."""
        carrier = _Carrier()
        carrier.done.connect(deliver)           # a slot of this library: queued, and cut when it is deleted
        self._carriers.add(carrier)
        threading.Thread(target=lambda: carrier.done.emit((carrier, work())), name=name, daemon=True).start()

    @Slot(object)
    def _scan_done(self, carried) -> None:
        carrier, (number, entries) = carried
        self._carriers.discard(carrier)
        # Scans run side by side: an older one (the folders before "Add folder…") may end last.
        if number > self._newest_delivered:
            self._newest_delivered = number
            self.scanned.emit(entries)

    @Slot(object)
    def _inspect_done(self, carried) -> None:
        carrier, entry = carried
        self._carriers.discard(carrier)
        self.inspected.emit(entry)

    def entry(self, path: str) -> ModelEntry | None:
        return next((e for e in self.entries if os.path.normcase(str(e.path)) == os.path.normcase(path)), None)

    def _remember(self, entries: list[ModelEntry]) -> None:
        self.entries = entries

    def _inspect_all(self, folders: list[Path]) -> list[ModelEntry]:
        found = find_gguf_files(folders)
        known = {os.path.normcase(str(p)) for p in found}
        extra = [Path(f) for f in self._extra_files() if os.path.normcase(str(f)) not in known]
        # A listed file that was moved or deleted stays listed, with the reason ("cannot read the file").
        return [self._inspect_one(p) for p in found + extra]

    def _inspect_one(self, path: Path) -> ModelEntry:
        try:
            st = path.stat()
            key = (str(path), st.st_size, st.st_mtime)
        except OSError:
            return inspect_model(path)
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        entry = inspect_model(path)
        with self._lock:
            self._cache[key] = entry
        return entry
