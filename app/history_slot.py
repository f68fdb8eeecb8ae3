"""@history_slot: the one way a GUI slot meets a history that fails in use (SAFETY.md, "Conversations are the
user's data"). An sqlite3.Error from the slot (a write refused: read-only, full disk, a lock held elsewhere; a
damaged file) ends it and is reported in the main window's banner, never raised into the Qt event loop.

Contract for such slots: read and write the store before changing widgets, so one that fails leaves the window
showing what is stored (a refused rename: the old title)."""
from __future__ import annotations

import functools
import sqlite3


def history_slot(slot):
    """For methods of the main window or of a widget inside it: the report goes to the top-level window's
    `_on_save_failed(error, kept=False)` (kept=False: what the slot was doing did not happen)."""
    @functools.wraps(slot)          # PySide6 reads the wrapped signature: triggered(bool) still calls slot(self)
    def reporting(self, *args, **kwargs):
        try:
            return slot(self, *args, **kwargs)
        except sqlite3.Error as error:
            self.window()._on_save_failed(error, kept=False)
    return reporting
