"""`python installer/make_icon.py`: draws the Halo Chat icon with QPainter and writes assets/icons/halo.ico.

The icon is a glowing ring (the halo) around a speech bubble's tail on a dark rounded square. An .ico is
a small directory (ICONDIR + one ICONDIRENTRY per size) followed by PNG images; Windows Vista and later
read PNG entries at every size, so each size is rendered separately (crisp small sizes) and stored as PNG.
Run it again only when the drawing changes; the .ico is committed.
"""
from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

SIZES = (16, 24, 32, 48, 64, 128, 256)
ICO_PATH = Path(__file__).resolve().parents[1] / "assets" / "icons" / "halo.ico"


def render_png(size: int) -> bytes:
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QPointF, QRectF, Qt
    from PySide6.QtGui import QBrush, QColor, QImage, QPainter, QPainterPath, QPen, QRadialGradient

    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    p = QPainter(image)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    s = float(size)
    # Background: a dark rounded square.
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(QColor("#161a2e"))
    p.drawRoundedRect(QRectF(0, 0, s, s), s * 0.22, s * 0.22)
    centre = QPointF(s / 2, s * 0.47)
    # The glow behind the ring.
    glow = QRadialGradient(centre, s * 0.46)
    glow.setColorAt(0.55, QColor(255, 176, 60, 110))
    glow.setColorAt(1.0, QColor(255, 176, 60, 0))
    p.setBrush(QBrush(glow))
    p.drawEllipse(centre, s * 0.46, s * 0.46)
    # The halo ring.
    pen = QPen(QColor("#ffc35a"), max(1.5, s * 0.085))
    p.setPen(pen)
    p.setBrush(Qt.BrushStyle.NoBrush)
    p.drawEllipse(centre, s * 0.29, s * 0.29)
    # A speech-bubble tail hanging from the ring, bottom left.
    tail = QPainterPath(QPointF(s * 0.30, s * 0.66))
    tail.lineTo(QPointF(s * 0.22, s * 0.86))
    tail.lineTo(QPointF(s * 0.46, s * 0.75))
    tail.closeSubpath()
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(QColor("#ffc35a"))
    p.drawPath(tail)
    p.end()

    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    buffer.close()
    return bytes(data)


def pack_ico(pngs: dict[int, bytes]) -> bytes:
    """ICONDIR (reserved 0, type 1, count) + ICONDIRENTRY per image (16 bytes; 0 means 256) + data."""
    header = struct.pack("<HHH", 0, 1, len(pngs))
    offset = len(header) + 16 * len(pngs)
    entries, blobs = b"", b""
    for size, png in sorted(pngs.items()):
        dim = 0 if size >= 256 else size
        entries += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(png), offset)
        blobs += png
        offset += len(png)
    return header + entries + blobs


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    ICO_PATH.parent.mkdir(parents=True, exist_ok=True)
    ICO_PATH.write_bytes(pack_ico({size: render_png(size) for size in SIZES}))
    print(f"wrote {ICO_PATH} ({ICO_PATH.stat().st_size} bytes, sizes {SIZES})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
