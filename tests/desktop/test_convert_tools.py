"""Issue 28, defect 7: *Convert a Hugging Face model…* when the tools are missing.

Seen before: after the README set-up the button was greyed out, with the reason only in the
disabled button's tooltip and no way to install what is missing. Now the reason is a visible
line in the model manager beside *Install conversion tools*, which makes the app's conversion
environment with pip's lines as progress, says a failure with the commands to run instead,
and, once installed, remembers the interpreter and turns *Convert* on.

The installer a person starts downloads about a gigabyte; the window's test puts stand-ins in
its place (one that fails, one that leaves an interpreter passing the tool check), and the
real installer is run once against a package that cannot exist, with no index.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from desktop import convert_setup
from desktop.app import DesktopApp
from desktop.views.convert_tools import CANCELLING, INSTALL_LABEL
from desktop.views.model_manager import CHECKING_TOOLS
from tests.desktop.modal import answer_next_box


def test_the_missing_tools_are_said_and_installed_from_the_window(
    qtbot: QtBot, desktop: DesktopApp
) -> None:
    dialog = desktop.models_dialog()
    dialog.show()
    qtbot.waitUntil(lambda: dialog.convert_problem != CHECKING_TOOLS, timeout=30000)
    tools = dialog.tools
    assert not dialog.convert_button.isEnabled()
    assert tools.isVisible() and tools.text.isVisible()
    assert tools.text.text() == dialog.convert_problem
    assert "torch" in tools.text.text()
    assert tools.install_button.isVisible() and tools.install_button.text() == INSTALL_LABEL

    def fails(env: Path, report: Callable[[str], None], cancel: threading.Event) -> Path:
        report("Collecting torch==2.13.0")
        raise convert_setup.InstallFailed(
            "Installing the conversion tools failed (no network). Run: python3 -m venv X"
        )

    tools.installer = fails
    tools.install_button.click()
    qtbot.waitUntil(lambda: not tools.installing, timeout=30000)
    assert tools.text.text().endswith("Run: python3 -m venv X")
    assert tools.install_button.isEnabled() and "try again" in tools.install_button.text()
    assert not dialog.convert_button.isEnabled()

    lines: list[str] = []

    def works(env: Path, report: Callable[[str], None], cancel: threading.Event) -> Path:
        report("Successfully installed torch-2.13.0")
        lines.append(tools.text.text())
        python = convert_setup.env_python(env)
        python.parent.mkdir(parents=True)
        python.write_text("#!/bin/sh\nexit 0\n")  # passes the tool check: every tool found
        python.chmod(0o755)
        return python

    tools.installer = works
    tools.install_button.click()
    qtbot.waitUntil(lambda: dialog.convert_problem is None, timeout=30000)
    assert dialog.convert_button.isEnabled()
    assert not tools.isVisible()
    python = convert_setup.env_python(tools.env)
    assert desktop.controller.settings.convert_python == python
    saved = json.loads(desktop.controller.settings.paths.config_file.read_text())
    assert saved["convert_python"] == str(python)


def test_a_failed_installation_says_what_to_run(tmp_path: Path) -> None:
    """The real installer, failing at its first step (the environment's folder cannot be
    made: a file stands in its way), as fast as a step can fail."""
    wanted = convert_setup.requirements()
    assert "torch==2.13.0" in wanted
    assert any(r.startswith("openvino-tokenizers==") for r in wanted)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = blocker / "convert-env"
    lines: list[str] = []
    with pytest.raises(convert_setup.InstallFailed) as failed:
        convert_setup.install(env, lines.append, wanted=wanted)
    message = str(failed.value)
    assert message.startswith("Installing the conversion tools failed (")
    assert "Error" in message.partition("(")[2]  # the step's own last line
    assert message.endswith(convert_setup.manual_text(env, wanted))
    assert f"-m venv {env} && " in message and "torch==2.13.0" in message
    assert lines[0] == f"Step 1 of 3: {sys.executable} -m venv {env}…"


def test_the_installation_shows_progress_and_cancel_stops_it(
    qtbot: QtBot, desktop: DesktopApp
) -> None:
    """While it installs, a busy bar and *Cancel* show (the install button goes); *Cancel*
    ends it at once and offers the installation again. The stand-in installer runs until it
    is cancelled, as pip downloading torch would."""
    dialog = desktop.models_dialog()
    dialog.show()
    qtbot.waitUntil(lambda: dialog.convert_problem != CHECKING_TOOLS, timeout=30000)
    tools = dialog.tools
    reached = threading.Event()

    def runs_until_cancelled(
        env: Path, report: Callable[[str], None], cancel: threading.Event
    ) -> Path:
        report("Downloading torch-2.13.0 (190 MB)")
        reached.set()
        if not cancel.wait(60):
            raise AssertionError("never cancelled")
        raise convert_setup.InstallCancelled("Installing the conversion tools was cancelled.")

    tools.installer = runs_until_cancelled
    tools.install_button.click()
    assert tools.installing
    qtbot.waitUntil(lambda: "Downloading torch" in tools.text.text(), timeout=30000)
    assert tools.progress.isVisible() and tools.cancel_button.isVisible()
    assert not tools.install_button.isVisible()
    assert reached.is_set()
    tools.cancel_button.click()
    assert tools.text.text() == CANCELLING
    qtbot.waitUntil(lambda: not tools.installing, timeout=30000)
    assert "cancelled" in tools.text.text()
    assert not tools.progress.isVisible() and not tools.cancel_button.isVisible()
    assert tools.install_button.isVisible() and tools.install_button.text() == INSTALL_LABEL
    assert not dialog.convert_button.isEnabled()


def test_cancel_kills_a_silent_step_at_once(tmp_path: Path) -> None:
    """pip prints nothing for minutes while it downloads torch without a terminal: cancel
    must kill the step then, not at its next line. The step here is a child that says it
    started and then waits silently for 10 minutes."""
    cancel, started = threading.Event(), threading.Event()
    lines: list[str] = []

    def report(line: str) -> None:
        lines.append(line)
        started.set()

    silent = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(600)"]
    result: list[list[str] | None] = []
    runner = threading.Thread(
        target=lambda: result.append(convert_setup._run(silent, report, cancel))
    )
    runner.start()
    assert started.wait(60)
    cancel.set()
    runner.join(120)
    assert not runner.is_alive(), "the silent step was not killed"
    assert result == [["started", convert_setup.CANCELLED]]


def test_a_cancelled_installation_starts_no_step(tmp_path: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    lines: list[str] = []
    with pytest.raises(convert_setup.InstallCancelled):
        convert_setup.install(tmp_path / "env", lines.append, wanted=["nothing"], cancel=cancel)
    assert lines == [] and not (tmp_path / "env").exists()


def test_quitting_while_it_installs_asks_first(qtbot: QtBot, desktop: DesktopApp) -> None:
    """Issue 28, defect 12: quitting mid-download (or mid-installation) gave no warning.
    Now Quit asks; No keeps the work running."""
    from PySide6.QtWidgets import QMessageBox

    assert desktop.running_work() is None
    dialog = desktop.models_dialog()
    dialog.show()
    qtbot.waitUntil(lambda: dialog.convert_problem != CHECKING_TOOLS, timeout=30000)
    tools = dialog.tools

    def runs_until_cancelled(
        env: Path, report: Callable[[str], None], cancel: threading.Event
    ) -> Path:
        cancel.wait(60)
        raise convert_setup.InstallCancelled("cancelled")

    tools.installer = runs_until_cancelled
    tools.install_button.click()
    assert desktop.running_work() == "Installing the conversion tools"
    asked = answer_next_box(QMessageBox.StandardButton.No)
    desktop.quit()
    assert asked and asked[0].startswith("Installing the conversion tools is still running")
    assert tools.installing  # not quit, not cancelled
    tools.cancel_button.click()
    qtbot.waitUntil(lambda: not tools.installing, timeout=30000)
    assert desktop.running_work() is None
