"""``NoticeBar``: a one-line message above the message box, with a few action buttons.

Used for what the person should know and can act on at once: a refused message (what to do
next), or why the chat window opened instead of a tray icon.

Threading: GUI thread only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QStyle,
    QToolButton,
    QVBoxLayout,
    QWidget,
)


@dataclass(frozen=True)
class NoticeAction:
    """A button of the notice; pressing it also closes the notice."""

    label: str
    run: Callable[[], None]
    tooltip: str = ""


class NoticeBar(QFrame):
    """Hidden until :meth:`show_notice`; the close button (or :meth:`dismiss`) hides it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("notice")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        # Coloured by the application style sheet of desktop.theme (light or dark).
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.close_button = QToolButton()
        self.close_button.setIcon(
            self.style().standardIcon(QStyle.StandardPixmap.SP_TitleBarCloseButton)
        )
        self.close_button.setToolTip("Dismiss")
        self.close_button.setAutoRaise(True)
        self.close_button.clicked.connect(self.dismiss)
        top = QHBoxLayout()
        top.addWidget(self.label, 1)
        top.addWidget(self.close_button, 0, Qt.AlignmentFlag.AlignTop)
        self._row = QHBoxLayout()
        self._row.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 4, 4, 4)
        layout.addLayout(top)
        layout.addLayout(self._row)
        self.buttons: dict[str, QPushButton] = {}
        self.hide()

    @property
    def text(self) -> str:
        return "" if self.isHidden() else self.label.text()

    def show_notice(self, text: str, actions: Sequence[NoticeAction] = ()) -> None:
        for button in self.buttons.values():
            self._row.removeWidget(button)
            button.deleteLater()
        self.buttons = {}
        self.label.setText(text)
        for position, action in enumerate(actions):
            button = QPushButton(action.label)
            button.setToolTip(action.tooltip)
            button.clicked.connect(lambda _=False, run=action.run: self._run(run))
            self._row.insertWidget(position, button)
            self.buttons[action.label] = button
        self.show()

    def dismiss(self) -> None:
        self.hide()

    def _run(self, run: Callable[[], None]) -> None:
        self.dismiss()
        run()
