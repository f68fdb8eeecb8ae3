"""Render halo.svg into the PNG sizes the app uses and a multi-size halo.ico for Windows.

    QT_QPA_PLATFORM=offscreen python assets/icons/make_icons.py

The .ico is written by hand (ICONDIR + PNG-compressed entries, valid since Windows Vista), so no image
plugin is needed.
"""
from __future__ import annotations

import struct
import sys
from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

HERE = Path(__file__).resolve().parent
SIZES = (16, 24, 32, 48, 64, 128, 256)


def render(renderer: QSvgRenderer, size: int) -> bytes:
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    return bytes(data)


def write_ico(path: Path, pngs: dict[int, bytes]) -> None:
    header = struct.pack("<HHH", 0, 1, len(pngs))         # reserved, type 1 = icon, count
    offset = 6 + 16 * len(pngs)
    entries, blobs = b"", b""
    for size, png in sorted(pngs.items()):
        dim = 0 if size >= 256 else size                 # 0 means 256 in an ICONDIRENTRY
        entries += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(png), offset + len(blobs))
        blobs += png
    path.write_bytes(header + entries + blobs)


def main() -> int:
    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    renderer = QSvgRenderer(str(HERE / "halo.svg"))
    if not renderer.isValid():
        print("halo.svg did not parse", file=sys.stderr)
        return 1
    pngs = {size: render(renderer, size) for size in SIZES}
    for size, png in pngs.items():
        if size in (16, 32, 48, 64, 128, 256):
            (HERE / f"halo-{size}.png").write_bytes(png)
    write_ico(HERE / "halo.ico", pngs)
    print(f"wrote {len(pngs)} sizes to {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
