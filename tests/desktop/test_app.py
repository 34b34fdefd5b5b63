"""The app as a person starts it: ``sidelight`` with no subcommand, one instance per user,
the server up with the demo model, a clean exit on Ctrl+C. Plus the guard on its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import psutil
from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.instance import SingleInstance, instance_name
from desktop.state import DesktopState
from engine.store.catalog import Catalog, MachineInfo
from tests.conftest import ROOT
from tests.desktop.test_settings_dialog import free_port
from tests.waiting import wait_until


def test_second_instance_signals_the_first(qtbot: QtBot, tmp_path: Path) -> None:
    name = instance_name(tmp_path)
    assert name == instance_name(tmp_path) != instance_name(tmp_path / "other")
    first = SingleInstance(name)
    assert not first.notify_running(200)  # nobody there yet
    assert first.listen()
    second = SingleInstance(name)
    with qtbot.waitSignal(first.activated, timeout=5000):
        assert second.notify_running()
    first.close()


def test_sidelight_starts_the_tray_app_once_and_quits_on_ctrl_c(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDELIGHT_")}
    env.update(
        SIDELIGHT_HOME=str(tmp_path / "home"),
        SIDELIGHT_PORT=str(port),
        QT_QPA_PLATFORM="offscreen",
        XDG_CONFIG_HOME=str(tmp_path / "xdg"),
        PYTHONUNBUFFERED="1",
    )
    command = [sys.executable, "-m", "engine.cli"]
    with (tmp_path / "stderr.txt").open("w") as stderr:
        first = subprocess.Popen(command, env=env, cwd=ROOT, stderr=stderr)

    def ready() -> dict[str, Any] | None:
        assert first.poll() is None, (tmp_path / "stderr.txt").read_text()
        try:
            health: dict[str, Any] = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).json()
        except httpx.HTTPError:
            return None
        return health if health["status"] == "ready" else None

    try:
        health = wait_until(
            ready,
            lambda: f"the app's server ready:\n{(tmp_path / 'stderr.txt').read_text()}",
            60,
            interval=0.2,
        )
        assert health["model"] == "sidelight-demo"
        worker = psutil.Process(health["worker_pid"])

        second = subprocess.run(
            command, env=env, cwd=ROOT, capture_output=True, timeout=60, check=False
        )
        assert second.returncode == 0, second.stderr
        log = tmp_path / "home" / "logs" / "sidelight.log"
        wait_until(
            lambda: "another launch asked" in log.read_text(), "the second launch logged", 10
        )
        assert "another launch asked for the chat window" in log.read_text()

        first.send_signal(signal.SIGINT)
        assert first.wait(30) == 0
        worker.wait(10)  # the engine worker went with it
        assert not (tmp_path / "xdg" / "autostart").exists()  # never switched on by itself
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()


def test_first_run_welcome_recommends_a_model_that_fits(qtbot: QtBot, desktop: DesktopApp) -> None:
    qtbot.waitUntil(lambda: desktop._welcome_dialog is not None, timeout=15000)
    dialog = desktop._welcome_dialog
    assert dialog is not None and dialog.isVisible()
    recommended = Catalog.load().recommend(MachineInfo.detect())
    assert recommended is not None and dialog.recommended == recommended
    text = " ".join(label.text() for label in dialog.findChildren(QLabel))
    assert str(desktop.controller.api_base_url) in text and recommended.name in text

    dialog.accept()
    models = desktop._models
    assert models is not None and models.isVisible()
    assert models.selected_entry_id() == recommended.id
    assert DesktopState.load(desktop.controller.settings.paths.config_dir).welcomed
