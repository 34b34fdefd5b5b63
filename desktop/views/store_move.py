"""The window that shows an old model store moving to the data folder, and lets it pause.

Shown by the app while :class:`desktop.controller.Controller` moves the store (a copy across
filesystems can take minutes for large models). *Continue at next start* stops the move
between chunks: every model stays whole in the old or the new place, and the next start
finishes the move. If the move stops on an error, the window says so and stays open.

Threading: GUI thread only.
"""

from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from desktop.controller import Controller, move_text
from desktop.views.screen import fit_to_screen
from engine.store.relocate import MoveProgress

_BAR_STEPS = 1000


class MoveDialog(QDialog):
    """Progress of the store move: models and GB done, a bar, and a way to pause it."""

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.last_progress: MoveProgress | None = None
        self.setWindowTitle("Sidelight — moving models")
        old = controller.settings.paths.legacy_models_dir
        self.intro = QLabel(
            f"Sidelight keeps models in {controller.settings.paths.models_dir} now and is "
            f"moving them there from {old}. The chat works meanwhile; each model is usable "
            "as soon as it has moved."
        )
        self.intro.setWordWrap(True)
        self.progress_label = QLabel("Moving models to the data folder…")
        self.progress_label.setWordWrap(True)
        self.bar = QProgressBar()
        self.bar.setRange(0, _BAR_STEPS)
        self.error_label = QLabel()
        self.error_label.setProperty("role", "error")
        self.error_label.setWordWrap(True)
        self.error_label.hide()
        self.pause_button = QPushButton("Continue at next start")
        self.pause_button.setToolTip(
            "Stop after the current chunk; every model stays whole, and the next start "
            "moves the rest"
        )
        self.pause_button.clicked.connect(self._pause)
        layout = QVBoxLayout(self)
        layout.addWidget(self.intro)
        layout.addWidget(self.progress_label)
        layout.addWidget(self.bar)
        layout.addWidget(self.error_label)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.pause_button)
        layout.addLayout(buttons)
        controller.move_progress.connect(self.show_progress)
        controller.move_finished.connect(self.finished_moving)
        if controller.moving is not None:
            self.show_progress(controller.moving)
        fit_to_screen(self, QSize(520, 200))

    def show_progress(self, progress: MoveProgress) -> None:
        self.last_progress = progress
        self.progress_label.setText(move_text(progress))
        total = progress.bytes_total
        self.bar.setValue(round(_BAR_STEPS * progress.bytes_done / total) if total else 0)

    def finished_moving(self, error: str | None) -> None:
        """Close when done; on an error, say what and keep the window for reading."""
        if error is None:
            self.accept()
            return
        self.error_label.setText(error)
        self.error_label.show()
        moved = self.last_progress
        if moved is not None:
            self.progress_label.setText(f"Moved {moved.models_done} of {moved.models_total}.")
        self.bar.hide()
        self.pause_button.setText("Close")
        self.pause_button.setToolTip("")
        self.pause_button.clicked.disconnect(self._pause)
        self.pause_button.clicked.connect(self.reject)

    def _pause(self) -> None:
        self.controller.cancel_move()
        self.pause_button.setEnabled(False)
        self.progress_label.setText(
            "Stopping after the current chunk; the next start moves the rest…"
        )
