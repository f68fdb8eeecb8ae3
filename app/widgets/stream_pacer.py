"""Re-rendering a growing text (a streaming reply's Markdown) at a pace its cost allows.

A render parses and lays out the whole text again, so it costs in proportion to the text's length (a 20 KB
table takes a tenth of a second or more). At a fixed rate, renders of a long reply ran back to back (the GUI
stalled) and the work over a reply grew with the square of its length. The pacer leaves the GUI thread quiet
for QUIET_FACTOR times as long as the last render took, so renders thin out as they get dearer: at most
1 / (1 + QUIET_FACTOR) of a stream's time goes to rendering, on any machine and for any content.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer

QUIET_FACTOR = 4


class StreamPacer(QObject):
    """Calls `render` with the latest text submitted, at most every `min_interval_ms` (texts arriving in
    between are coalesced) and never before the quiet time after the previous render is over: a pending text
    is looked at every `min_interval_ms` until then."""

    # Seconds, monotonic; only differences are used. Tests replace it to simulate a slow machine.
    clock: Callable[[], float] = staticmethod(time.perf_counter)

    def __init__(self, render: Callable[[str], None], min_interval_ms: int, parent: QObject | None = None):
        super().__init__(parent)
        self._render = render
        self._min_interval_ms = min_interval_ms
        self._pending: str | None = None
        self._quiet_until = -math.inf
        self._timer = QTimer(self, singleShot=True)
        self._timer.timeout.connect(self._on_timeout)

    def submit(self, text: str) -> None:
        """Render `text` soon; a newer text submitted before that replaces it."""
        self._pending = text
        if not self._timer.isActive():
            self._timer.start(self._min_interval_ms)

    def pending(self) -> str | None:
        """The text submitted but not rendered yet (None when there is none)."""
        return self._pending

    def flush(self) -> None:
        """Render the pending text now, whatever the pace (a finished reply is shown whole at once)."""
        self._timer.stop()
        if self._pending is None:
            return
        text, self._pending = self._pending, None
        started = self.clock()
        self._render(text)
        ended = self.clock()
        self._quiet_until = ended + QUIET_FACTOR * (ended - started)

    def discard(self) -> None:
        """Forget the pending text: the caller renders something else itself."""
        self._timer.stop()
        self._pending = None

    def _on_timeout(self) -> None:
        if self.clock() < self._quiet_until:
            self._timer.start(self._min_interval_ms)
        else:
            self.flush()
