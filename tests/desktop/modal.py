"""Answering a modal message box the code under test opens, from the test (GUI thread only)."""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox


def answer_next_box(button: QMessageBox.StandardButton) -> list[str]:
    """Press ``button`` on the next modal message box once it opens; returns the list its
    text is appended to, so the test can check what was asked. The box runs its own event
    loop, so the answer is polled from timers on the GUI thread."""
    asked: list[str] = []

    def answer() -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(10, answer)
            return
        asked.append(box.text())
        box.button(button).click()

    QTimer.singleShot(0, answer)
    return asked
