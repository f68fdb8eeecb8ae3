"""A one-line hint when Qt cannot start its platform plugin (on Linux, usually missing xcb libraries).

Qt reports that with a fatal message and aborts the process, so no Python exception can carry it: while
the QApplication is built, a message handler watches for that fatal message and prints the hint first.
"""
from __future__ import annotations

import sys
from collections.abc import Callable

from PySide6.QtCore import QtMsgType, qInstallMessageHandler

# The Debian/Ubuntu packages Qt's xcb platform plugin (libqxcb.so, libQt6XcbQpa) links against and a
# fresh desktop may lack: read from `ldd` on PySide6's plugin, mapped to packages with `dpkg -S`.
# README.md ("Linux system packages") lists the same names; tests/unit/test_platform_hint.py keeps them equal.
XCB_PACKAGES = ("libxcb-cursor0", "libxcb-icccm4", "libxcb-keysyms1", "libxcb-image0", "libxcb-randr0",
                "libxcb-render-util0", "libxcb-shape0", "libxcb-xkb1", "libxcb-util1", "libxkbcommon-x11-0",
                "libegl1", "libgl1", "libfontconfig1", "libdbus-1-3")

HINT = ("Halo Chat: Qt could not start its display platform plugin. On Debian/Ubuntu install: "
        "sudo apt install " + " ".join(XCB_PACKAGES) + " (or run with QT_QPA_PLATFORM=wayland).")


def platform_failure(text: str) -> bool:
    """True for Qt's messages that mean no platform plugin could start."""
    return "platform plugin" in text and ("could not" in text.lower() or "no qt platform" in text.lower())


def build_application(make: Callable[[], object], stream=None) -> object:
    """Runs `make()` (which builds the QApplication) with the hint armed; restores Qt's default handler."""
    out = stream or sys.stderr

    def handler(kind: QtMsgType, _context, text: str) -> None:
        out.write(text + "\n")
        if kind == QtMsgType.QtFatalMsg and platform_failure(text):
            out.write(HINT + "\n")
        out.flush()

    qInstallMessageHandler(handler)
    try:
        return make()
    finally:
        qInstallMessageHandler(None)
