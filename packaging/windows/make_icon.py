"""Render ``resources/icons/sidelight.svg`` into a Windows ``.ico`` (16 to 256 px).

    python packaging/windows/make_icon.py OUT.ico

Used for the executables (PyInstaller) and the installer (NSIS). Sizes up to 48 px are stored
as 32-bit bitmaps, which every reader accepts (NSIS too); 256 px as PNG, as Windows expects.
Needs PySide6 (the project's ``gui`` extra); runs offscreen.
"""

from __future__ import annotations

import os
import struct
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SVG = ROOT / "resources" / "icons" / "sidelight.svg"
SIZES = (16, 24, 32, 48, 256)


def render(size: int) -> tuple[bytes, bytes]:
    """The icon at ``size`` px: (PNG bytes, bottom-up BGRA rows)."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    QSvgRenderer(str(SVG)).render(painter)
    painter.end()
    with tempfile.TemporaryDirectory() as folder:
        png = Path(folder) / "icon.png"
        image.save(str(png))
        data = png.read_bytes()
    # Format_ARGB32 is BGRA in memory on little-endian machines; bitmaps store rows bottom-up.
    pixels, stride = bytes(image.constBits()), image.bytesPerLine()
    rows = [pixels[y * stride : y * stride + size * 4] for y in range(size)]
    return data, b"".join(reversed(rows))


def bitmap(size: int, bgra: bytes) -> bytes:
    header = struct.pack("<IiiHHIIiiII", 40, size, size * 2, 1, 32, 0, len(bgra), 0, 0, 0, 0)
    mask_row = ((size + 31) // 32) * 4  # the AND mask: all zero, alpha does the work
    return header + bgra + bytes(mask_row * size)


def ico(images: list[tuple[int, bytes]]) -> bytes:
    out = struct.pack("<HHH", 0, 1, len(images))
    offset = 6 + 16 * len(images)
    for size, blob in images:
        side = 0 if size >= 256 else size
        out += struct.pack("<BBBBHHII", side, side, 0, 0, 1, 32, len(blob), offset)
        offset += len(blob)
    return out + b"".join(blob for _, blob in images)


def main() -> int:
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__ or "")
        return 2
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication([])
    images = []
    for size in SIZES:
        png, bgra = render(size)
        images.append((size, png if size >= 256 else bitmap(size, bgra)))
    target = Path(sys.argv[1])
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(ico(images))
    del app
    return 0


if __name__ == "__main__":
    sys.exit(main())
