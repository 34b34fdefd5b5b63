"""The tray menu on the real engine: state and URL, switching model and device, error states.

Only extra devices are made up (this machine has a CPU alone): choosing a GPU here makes the
real engine fail to load, which is exactly what the error state must show.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import httpx
import pytest
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.tray import TrayMenu
from engine.devices import DeviceInfo
from engine.models import DEMO_MODEL_ID
from engine.store.gguf_import import import_gguf
from engine.supervisor.states import ERROR, READY
from tests.conftest import TINY_GGUF, dialogue

FAKE_GPU = DeviceInfo(name="GPU.0", full_name="Intel(R) Arc(TM) Graphics", kind="gpu")
FAKE_NPU = DeviceInfo(name="NPU", full_name="Intel(R) AI Boost", kind="npu")


def open_menu(menu: TrayMenu) -> list[str]:
    menu.aboutToShow.emit()  # what opening it does
    return [a.text() for a in menu.actions() if not a.isSeparator()]


def test_menu_shows_state_url_and_copies_the_base_url(qtbot: QtBot, desktop: DesktopApp) -> None:
    menu = desktop.tray.menu
    entries = open_menu(menu)
    url = f"{desktop.controller.server_url}/v1"
    assert entries[0] == "Ready: sidelight-demo on CPU"
    assert entries[1] == f"Copy API URL  {url}"
    assert entries[2:] == [
        "Models",
        "In memory",  # the demo model is loaded: beside Models, not inside it
        "Device",
        "Download models…",
        "Open chat",
        "Requests…",
        "Settings…",
        "Quit Sidelight",
    ]
    menu.actions()[1].trigger()
    assert QApplication.clipboard().text() == url
    assert desktop.tray.icon_name == "idle"
    assert url in desktop.tray.toolTip()

    with qtbot.waitSignal(menu.open_chat):
        next(a for a in menu.actions() if a.text() == "Open chat").trigger()
    assert desktop.chat.isVisible()


def test_serving_every_interface_copies_a_reachable_url(
    make_desktop: Callable[..., DesktopApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bound to 0.0.0.0, the copied URL is loopback (0.0.0.0 is no address to connect to)."""
    monkeypatch.setenv("SIDELIGHT_HOST", "0.0.0.0")
    monkeypatch.setenv("SIDELIGHT_API_KEY", "k3y")
    desktop = make_desktop()
    menu = desktop.tray.menu
    entry = open_menu(menu)[1]
    assert entry.startswith("Copy API URL  http://127.0.0.1:"), entry
    menu.actions()[1].trigger()
    url = QApplication.clipboard().text()
    assert url == entry.removeprefix("Copy API URL  ")
    answer = httpx.get(f"{url}/models", headers={"Authorization": "Bearer k3y"}, timeout=10)
    assert answer.status_code == 200


def test_switch_to_the_gguf_model_and_back_from_the_menu(
    qtbot: QtBot, desktop: DesktopApp, dialogues: dict[str, Any]
) -> None:
    controller = desktop.controller
    stored = import_gguf(controller.store, TINY_GGUF)
    menu = desktop.tray.menu
    open_menu(menu)
    models = menu.models_menu
    labels = [a.text() for a in models.actions() if a.data()]
    assert labels == ["Demo model (tiny, offline)", "sidelight-demo-f16"]
    assert menu.find_action(models, DEMO_MODEL_ID).isChecked()

    menu.find_action(models, stored.id).trigger()
    qtbot.waitUntil(
        lambda: controller.status.state == READY and controller.active_model_id == stored.id,
        timeout=60000,
    )
    assert controller.status.model is not None and controller.status.model.format == "gguf"
    open_menu(menu)
    assert menu.find_action(models, stored.id).isChecked()
    assert menu.actions()[0].text() == f"Ready: {stored.id} on CPU"
    assert desktop.chat.model_picker.currentData() == stored.id

    # The switched model answers in the chat.
    window = desktop.chat
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        window.send("Hello")
    assert window.last_reply == dialogue(dialogues, "hello")["reply"]
    assert desktop.controller.state.last_model == stored.id

    # The chat window's own picker changes only its chat (issue 28, defect 10).
    window.model_picker.activated.emit(window.model_picker.findData(DEMO_MODEL_ID))
    assert window.chat_model == DEMO_MODEL_ID
    assert controller.active_model_id == stored.id
    open_menu(menu)
    assert menu.find_action(models, stored.id).isChecked()


def test_a_switch_seen_as_ready_to_ready_is_remembered(desktop: DesktopApp) -> None:
    """With a worker per model the controller may see the old model ready, then the new one
    ready, with no loading status between (which status a listener reads first is a race):
    the new model must still be remembered for the next start."""
    controller = desktop.controller
    stored = import_gguf(controller.store, TINY_GGUF)
    ready = controller.status
    assert ready.state == READY and ready.model is not None
    assert ready.model.id == DEMO_MODEL_ID
    controller._apply_status(replace(ready, model=stored.spec()))
    assert controller.state.last_model == stored.id


def test_switch_device_from_the_menu_shows_failure_and_recovers(
    qtbot: QtBot,
    make_desktop: Callable[..., DesktopApp],
    cpu_devices: list[DeviceInfo],
) -> None:
    desktop = make_desktop(devices=[*cpu_devices, FAKE_GPU, FAKE_NPU])
    controller, menu = desktop.controller, desktop.tray.menu
    open_menu(menu)
    devices = menu.devices_menu
    cpu, gpu, npu = (menu.find_action(devices, name) for name in ("CPU", "GPU.0", "NPU"))
    assert cpu.isChecked() and cpu.text().startswith("CPU: ")
    assert gpu.isEnabled() and gpu.text() == "GPU.0: Intel(R) Arc(TM) Graphics"
    # The demo model is not an NPU build: greyed out, with the reason.
    assert not npu.isEnabled() and "cannot run on NPU" in npu.toolTip()

    gpu.trigger()
    qtbot.waitUntil(lambda: controller.status.state == ERROR, timeout=60000)
    assert controller.status.device == "GPU.0"
    assert desktop.tray.icon_name == "error"
    assert open_menu(menu)[0].startswith("Error: could not load sidelight-demo")
    assert controller.last_notification is not None
    title, _, is_error = controller.last_notification
    assert title == "Sidelight engine error" and is_error

    open_menu(menu)
    menu.find_action(menu.devices_menu, "CPU").trigger()
    qtbot.waitUntil(lambda: controller.status.state == READY, timeout=60000)
    assert controller.active_device == "CPU"
    assert desktop.tray.icon_name == "idle"
    assert open_menu(menu)[0] == "Ready: sidelight-demo on CPU"
