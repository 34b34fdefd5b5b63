"""``FormLabel``: a form's row label that never clips its last letter.

QLabel sizes itself by the text's advance width, but a glyph's ink can reach past its
advance (the "e" of "Temperature" in DejaVu Sans at 9 pt, at 1x and at 2x), and a form
layout gives the label exactly its size hint: the last letter lost a pixel column or more.
This label asks for a little room beyond the text, in the label's own font, so the slack
follows the scale factor and the theme.

Threading: GUI thread only.
"""

from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtWidgets import QLabel, QWidget


class FormLabel(QLabel):
    """A label for a form row; ``buddy`` receives the focus for its mnemonic (``&T``)."""

    def __init__(self, text: str, buddy: QWidget | None = None) -> None:
        super().__init__(text)
        if buddy is not None:
            self.setBuddy(buddy)

    def _slack(self) -> int:
        return self.fontMetrics().horizontalAdvance(" ")

    def sizeHint(self) -> QSize:
        hint = super().sizeHint()
        return QSize(hint.width() + self._slack(), hint.height())

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        return QSize(hint.width() + self._slack(), hint.height())
