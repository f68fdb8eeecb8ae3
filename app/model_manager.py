"""The library's state for the window: scans folders off the GUI thread and remembers each file's entry."""
from __future__ import annotations

import os
import threading
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.library import ModelEntry, find_gguf_files, inspect_model, library_folders


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
        self.scanned.connect(self._remember)

    def scan(self, extra_folders: list[str]) -> None:
        """Non-blocking; `scanned` follows (queued to the GUI thread)."""
        folders = library_folders(extra_folders)
        threading.Thread(target=lambda: self.scanned.emit(self._inspect_all(folders)), name="library-scan",
                         daemon=True).start()

    def scan_now(self, extra_folders: list[str]) -> list[ModelEntry]:
        """Blocking variant for start-up decisions and the screenshot script."""
        entries = self._inspect_all(library_folders(extra_folders))
        self._remember(entries)
        return entries

    def inspect(self, path: str) -> None:
        threading.Thread(target=lambda: self.inspected.emit(self._inspect_one(Path(path))),
                         name="library-inspect", daemon=True).start()

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
