"""Window sizes that fit the screen a window opens on (a 1366x768 laptop at 125 % has a
usable area of about 1093x580 logical pixels).

Threading: GUI thread only.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect, QSize
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QStyle, QStyleOptionFrame, QWidget

# Room left for the window manager's title bar and borders, which Qt knows only once shown.
SCREEN_SHARE = 0.9


def available_area(window: QWidget) -> QRect:
    """The usable part (without panels and docks) of the screen ``window`` is on."""
    screen = window.screen() or QGuiApplication.primaryScreen()
    return screen.availableGeometry()


def fit_to_screen(window: QWidget, preferred: QSize | None = None) -> None:
    """Resize ``window`` to ``preferred`` (default: its current size), but to no more than
    :data:`SCREEN_SHARE` of the available area, and move it inside that area."""
    area = available_area(window)
    wanted = preferred or window.size()
    size = wanted.boundedTo(
        QSize(int(area.width() * SCREEN_SHARE), int(area.height() * SCREEN_SHARE))
    ).expandedTo(window.minimumSize())
    window.resize(size)
    if not window.isVisible():  # a window already open stays where the person put it
        window.move(area.center() - QPoint(size.width() // 2, size.height() // 2))


def line_edit_width(widget: QWidget, text: str) -> int:
    """The width a line edit needs to show ``text`` whole, frame and margins included."""
    option = QStyleOptionFrame()
    option.initFrom(widget)
    metrics = widget.fontMetrics()
    # A few extra characters: the cursor, the clear button some styles add, rounding.
    inner = QSize(metrics.horizontalAdvance(text) + 3 * metrics.averageCharWidth(), 0)
    size = widget.style().sizeFromContents(QStyle.ContentsType.CT_LineEdit, option, inner, widget)
    return size.width()
