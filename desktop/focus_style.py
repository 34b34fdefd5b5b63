"""The application's style: Fusion, plus the keyboard focus ring drawn around spin boxes.

Every other focusable control gets its ring from the style sheet (``:focus { border }``,
:func:`desktop.theme.style_sheet_for`). On a spin box that rule hands the whole control to
Qt's style-sheet engine, which then draws the up and down buttons itself, as two flat bars
(seen in *Chat settings* with the focus in *Temperature*). So spin boxes stay out of that
rule, Fusion draws them whole, and this style adds the ring on top.

Threading: GUI thread only (a QStyle).
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QApplication, QProxyStyle, QStyle, QStyleOptionComplex, QWidget

RING_WIDTH = 2  # px, as the style sheet's ring
RING_RADIUS = 3.0


class FocusRingStyle(QProxyStyle):
    """Fusion with an outline round a focused spin box in ``ring``: the theme's live
    ``focus_ring`` colour object, read when painting, so a scheme change needs no new style.
    (Passed in, not imported: the theme installs this style.)"""

    def __init__(self, ring: QColor) -> None:
        super().__init__("Fusion")
        self._ring = ring

    def drawComplexControl(
        self,
        control: QStyle.ComplexControl,
        option: QStyleOptionComplex,
        painter: QPainter,
        widget: QWidget | None = None,
    ) -> None:
        super().drawComplexControl(control, option, painter, widget)
        if control != QStyle.ComplexControl.CC_SpinBox:
            return
        if not option.state & QStyle.StateFlag.State_HasFocus:
            return
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        pen = QPen(self._ring, RING_WIDTH)
        pen.setJoinStyle(Qt.PenJoinStyle.MiterJoin)
        painter.setPen(pen)
        painter.setBrush(Qt.BrushStyle.NoBrush)
        half = RING_WIDTH / 2
        rect = QRectF(option.rect).adjusted(half, half, -half, -half)
        painter.drawRoundedRect(rect, RING_RADIUS, RING_RADIUS)
        painter.restore()


_INSTALLED: list[FocusRingStyle] = []  # the style set on the app (Qt owns it; kept alive here)


def install(app: QApplication, ring: QColor) -> None:
    """Make :class:`FocusRingStyle` the application's style, once (``app.style()`` reads
    back Qt's style-sheet wrapper, so it cannot tell us what lies under it)."""
    if _INSTALLED and app.property(_MARK):
        return
    style = FocusRingStyle(ring)
    app.setStyle(style)
    app.setProperty(_MARK, True)
    _INSTALLED[:] = [style]


_MARK = "sidelightFocusRingStyle"
