"""The model manager's line about the conversion tools (issue 28, defect 7).

When conversion cannot run here, why is said as visible text (it was only a disabled button's
tooltip), beside *Install conversion tools*, which makes the app's conversion environment
(:mod:`desktop.convert_setup`) with a busy bar, the step and pip's last line as progress, a
*Cancel* button that kills the running step at once, and says a failure and the commands to
run instead.

Threading: GUI thread only; the installation runs as a :class:`desktop.jobs.Job`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QCoreApplication, Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from desktop import convert_setup
from desktop.jobs import Job
from desktop.taskman import TaskManager

logger = logging.getLogger(__name__)

INSTALL_LABEL = "Install conversion tools"
INSTALLING = "Installing the conversion tools (about 1 GB to download, a few minutes)…"
CANCEL_LABEL = "Cancel"
CANCELLING = "Cancelling the installation…"
# (env, report, cancel) -> the interpreter with the tools; tests put a stand-in here.
Installer = Callable[[Path, Callable[[str], None], threading.Event], Path]


def _install(env: Path, report: Callable[[str], None], cancel: threading.Event) -> Path:
    return convert_setup.install(env, report, cancel=cancel)


class ConvertTools(QWidget):
    """Why *Convert* is off, and the button that installs what is missing.

    ``installed(python)`` fires on the GUI thread once the environment is ready.
    """

    installed = Signal(object)  # Path of the new interpreter

    def __init__(self, tasks: TaskManager, env: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.tasks = tasks
        self.env = env
        self.installer: Installer = _install
        self.installing = False
        self._cancel = threading.Event()
        self.text = QLabel()
        self.text.setWordWrap(True)
        self.text.setProperty("role", "warning")
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.install_button = QPushButton(INSTALL_LABEL)
        self.install_button.setToolTip(
            f"Make a Python environment for conversion in {env} and install torch and "
            "optimum-intel into it (about 1 GB to download)"
        )
        self.install_button.clicked.connect(self.install)
        self.cancel_button = QPushButton(CANCEL_LABEL)
        self.cancel_button.setToolTip("Stop the installation now (pip is stopped at once)")
        self.cancel_button.clicked.connect(self.cancel)
        self.cancel_button.hide()
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)  # busy: pip says no total
        self.progress.setTextVisible(False)
        self.progress.setMaximumHeight(self.fontMetrics().height() // 2 + 2)
        self.progress.hide()
        words = QVBoxLayout()
        words.setContentsMargins(0, 0, 0, 0)
        words.addWidget(self.text)
        words.addWidget(self.progress)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(words, 1)
        layout.addWidget(self.install_button, 0, Qt.AlignmentFlag.AlignTop)
        layout.addWidget(self.cancel_button, 0, Qt.AlignmentFlag.AlignTop)
        self.hide()
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.cancel)  # quitting never waits for pip

    def show_problem(self, problem: str | None, *, installable: bool) -> None:
        """Say ``problem`` (None: conversion works, the line goes); ``installable`` offers
        the install button (not while the check still runs)."""
        if self.installing:
            return
        self.text.setText(problem or "")
        self.install_button.setVisible(installable)
        self.install_button.setEnabled(True)
        self.setVisible(problem is not None)

    def install(self) -> None:
        """Install the tools in the background, pip's lines shown as they come."""
        if self.installing:
            return
        self.installing = True
        self._cancel.clear()
        self.install_button.hide()
        self.cancel_button.setEnabled(True)
        self.cancel_button.show()
        self.progress.show()
        self.text.setText(INSTALLING)
        self.show()
        env, installer, cancel = self.env, self.installer, self._cancel

        def run(report: Callable[[str], None]) -> Path:  # a pool thread
            return installer(env, report, cancel)

        Job.with_progress(
            self.tasks,
            run,
            self._on_line,
            what="install the conversion tools",
            success=self._on_installed,
            failure=self._on_failed,
            expected=(convert_setup.InstallFailed, OSError),
        ).run()

    def cancel(self) -> None:
        """Stop an installation (*Cancel*, or the app quits): the running step is killed."""
        self._cancel.set()
        if self.installing:
            self.cancel_button.setEnabled(False)
            self.text.setText(CANCELLING)

    def _on_line(self, line: str) -> None:
        if not self._cancel.is_set():
            self.text.setText(f"{INSTALLING}\n{line}")

    def _ended(self) -> None:
        self.installing = False
        self.progress.hide()
        self.cancel_button.hide()

    def _on_installed(self, python: Path) -> None:
        self._ended()
        self.text.setText(f"The conversion tools are installed ({python}); checking them…")
        self.install_button.hide()
        self.installed.emit(python)

    def _on_failed(self, exc: Exception) -> None:
        self._ended()
        self.text.setText(str(exc) or f"Installing the conversion tools failed: {exc!r}")
        again = isinstance(exc, convert_setup.InstallCancelled)
        self.install_button.setText(INSTALL_LABEL if again else f"{INSTALL_LABEL} (try again)")
        self.install_button.setEnabled(True)
        self.install_button.show()
        self.show()
