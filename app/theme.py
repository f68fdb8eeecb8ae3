"""Light and dark looks: one layout stylesheet (assets/styles/base.qss) with colour tokens filled from a
palette file, plus a matching QPalette for what stylesheets do not reach (native dialogs, selection)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPalette
from PySide6.QtWidgets import QApplication

_TOKEN = re.compile(r"@([a-z_]+)")


def assets_dir() -> Path:
    # In a PyInstaller bundle the assets sit next to the unpacked modules.
    base = Path(getattr(sys, "_MEIPASS", Path(__file__).resolve().parents[1]))
    return base / "assets"


def app_icon() -> QIcon:
    icon = QIcon()
    for size in (16, 32, 48, 64, 128, 256):
        png = assets_dir() / "icons" / f"halo-{size}.png"
        if png.is_file():
            icon.addFile(str(png))
    svg = assets_dir() / "icons" / "halo.svg"
    if icon.isNull() and svg.is_file():
        icon.addFile(str(svg))
    return icon


def palette_colors(dark: bool) -> dict[str, str]:
    text = (assets_dir() / "styles" / ("dark.qss" if dark else "light.qss")).read_text(encoding="utf-8")
    colors = {}
    for line in text.splitlines():
        if m := re.match(r"\s*@([a-z_]+):\s*(#[0-9a-fA-F]{6})", line):
            colors[m.group(1)] = m.group(2)
    return colors


def system_prefers_dark() -> bool:
    hints = QGuiApplication.styleHints()
    return hints.colorScheme() == Qt.ColorScheme.Dark


def resolve_dark(theme: str) -> bool:
    return theme == "dark" or (theme == "system" and system_prefers_dark())


def apply_theme(app: QApplication, theme: str) -> dict[str, str]:
    """Applies `theme` ("light", "dark" or "system") to the whole app; returns the colours used."""
    colors = palette_colors(resolve_dark(theme))
    base = (assets_dir() / "styles" / "base.qss").read_text(encoding="utf-8")
    # Qt stylesheets want forward slashes in url(), also on Windows.
    base = base.replace("@icons", (assets_dir() / "icons").as_posix())
    app.setStyle("Fusion")
    app.setPalette(_palette(colors))
    app.setStyleSheet(_TOKEN.sub(lambda m: colors.get(m.group(1), m.group(0)), base))
    app.setProperty("halo_colors", colors)
    return colors


def current_colors() -> dict[str, str]:
    app = QApplication.instance()
    colors = app.property("halo_colors") if app else None
    return colors or palette_colors(False)


def _palette(c: dict[str, str]) -> QPalette:
    p = QPalette()
    role = QPalette.ColorRole
    for r, key in ((role.Window, "bg"), (role.WindowText, "text"), (role.Base, "raised"),
                   (role.AlternateBase, "panel"), (role.Text, "text"), (role.Button, "raised"),
                   (role.ButtonText, "text"), (role.Highlight, "accent"), (role.HighlightedText, "accent_text"),
                   (role.ToolTipBase, "raised"), (role.ToolTipText, "text"), (role.PlaceholderText, "muted"),
                   (role.Link, "accent")):
        p.setColor(r, QColor(c[key]))
    p.setColor(QPalette.ColorGroup.Disabled, role.Text, QColor(c["muted"]))
    p.setColor(QPalette.ColorGroup.Disabled, role.ButtonText, QColor(c["muted"]))
    return p
