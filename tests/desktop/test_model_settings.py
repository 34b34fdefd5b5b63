"""A model's own settings in the model manager (*Settings…*): the dialog shows each value and
its default, saves through the engine's per-model settings (the API's own format), shows the
engine's refusal naming the field, and a new load setting reloads the loaded model. Real
widgets, a real engine and server on a copy of the demo model in the store."""

from __future__ import annotations

from typing import Any

import httpx
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox, QPushButton
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.views.model_manager import ModelManager
from desktop.views.model_settings import ModelSettingsDialog
from engine.models import DEMO_MODEL_ID
from engine.supervisor.states import READY
from tests.conftest import TINY_MODEL, dialogue
from tests.server.harness import store_ir_copy

MODEL = "demo-copy"


def _open(qtbot: QtBot, desktop: DesktopApp, model_id: str) -> tuple[ModelManager, Any]:
    store_ir_copy(desktop.controller.store.root, model_id, TINY_MODEL, task="chat", reasoning=False)
    desktop.controller.refresh_models()
    manager = desktop.models_dialog()
    manager.show()
    manager.installed.select(model_id)
    button = manager.installed.settings_button
    assert button.isEnabled(), button.toolTip()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    dialog = manager.settings_dialog
    assert isinstance(dialog, ModelSettingsDialog) and dialog.isVisible()
    return manager, dialog


def _save(qtbot: QtBot, dialog: ModelSettingsDialog) -> None:
    save = dialog.buttons.button(QDialogButtonBox.StandardButton.Save)
    assert isinstance(save, QPushButton)
    qtbot.mouseClick(save, Qt.MouseButton.LeftButton)


def _reply(url: str, messages: list[dict[str, Any]], **fields: Any) -> str:
    body = {"model": MODEL, "messages": messages, "max_tokens": 24, **fields}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return str(response.json()["choices"][0]["message"]["content"])


def test_the_demo_model_has_no_settings_button_and_says_why(
    qtbot: QtBot, desktop: DesktopApp
) -> None:
    manager = desktop.models_dialog()
    manager.installed.select(DEMO_MODEL_ID)
    button = manager.installed.settings_button
    assert not button.isEnabled()
    assert "demo model" in button.toolTip()


def test_settings_show_defaults_refuse_bad_values_and_feed_the_api(
    qtbot: QtBot, desktop: DesktopApp, dialogues: dict[str, Any]
) -> None:
    manager, dialog = _open(qtbot, desktop, MODEL)
    store = desktop.controller.store
    # Each field shows the default beside it: the model's own context, greedy sampling
    # (its generation_config says do_sample false), the app's keep-alive and device.
    defaults = {key: label.text() for key, label in dialog.default_labels.items()}
    assert defaults["context_length"] == "default: 2,048"
    assert defaults["temperature"] == "default: 0 (always the likeliest)"
    assert defaults["keep_alive_seconds"] == (
        f"default: {desktop.controller.settings.idle_unload_seconds:g} s"
    )
    assert defaults["seed"] == "default: random"
    # Only the devices this machine has (the test machine: a CPU).
    devices = [dialog.device.itemData(i) for i in range(dialog.device.count())]
    assert devices == [None] + [d.name for d in desktop.controller.devices or []]
    assert "NPU" not in devices and "GPU" not in devices

    # Out of range: the engine's refusal, naming the field; nothing written.
    qtbot.keyClicks(dialog.fields["temperature"], "5")
    _save(qtbot, dialog)
    assert dialog.isVisible()
    assert "Temperature" in dialog.error.text() and "from 0 to 2" in dialog.error.text()
    assert store.prefs(MODEL).to_dict() == {}
    assert dialog.focusWidget() is dialog.fields["temperature"]
    dialog.fields["temperature"].clear()
    qtbot.keyClicks(dialog.fields["context_length"], "4096")  # over the model's 2048
    _save(qtbot, dialog)
    assert "Context length" in dialog.error.text() and "2048" in dialog.error.text()
    dialog.fields["context_length"].clear()

    # Good values are saved in the engine's per-model settings: the API reads the same.
    qtbot.keyClicks(dialog.fields["temperature"], "1.5")
    qtbot.keyClicks(dialog.fields["seed"], "42")
    qtbot.keyClicks(dialog.fields["repetition_penalty"], "1.1")
    dialog.kv_precision.setCurrentIndex(dialog.kv_precision.findData("f16"))
    _save(qtbot, dialog)
    assert not dialog.isVisible()
    saved = {
        "temperature": 1.5,
        "seed": 42,
        "repetition_penalty": 1.1,
        "kv_cache_precision": "f16",
    }
    assert store.prefs(MODEL).to_dict() == saved
    assert manager.progress_label.text() == f"Saved the settings of {MODEL}."
    url = desktop.controller.server_url
    assert url is not None
    shown = httpx.get(f"{url}/api/sidelight/models/{MODEL}/settings", timeout=30)
    assert shown.json()["settings"] == saved

    # A request that leaves sampling out gets the model's: the same reply as one that
    # names those values, and not the greedy one it would get by default.
    messages = dialogue(dialogues, "fallback-03")["messages"]
    implicit = _reply(url, messages)
    assert implicit == _reply(url, messages, temperature=1.5, seed=42, repetition_penalty=1.1)
    assert implicit != _reply(url, messages, temperature=0)

    # Reopened, the dialog shows the saved values; Restore Defaults then Save clears them.
    manager.installed.select(MODEL)
    qtbot.mouseClick(manager.installed.settings_button, Qt.MouseButton.LeftButton)
    again = manager.settings_dialog
    assert isinstance(again, ModelSettingsDialog)
    assert again.fields["temperature"].text() == "1.5"
    assert again.kv_precision.currentData() == "f16"
    restore = again.buttons.button(QDialogButtonBox.StandardButton.RestoreDefaults)
    qtbot.mouseClick(restore, Qt.MouseButton.LeftButton)
    _save(qtbot, again)
    assert store.prefs(MODEL).to_dict() == {}


def test_a_new_context_length_reloads_the_loaded_model(qtbot: QtBot, desktop: DesktopApp) -> None:
    controller = desktop.controller
    manager, dialog = _open(qtbot, desktop, MODEL)
    dialog.reject()
    controller.select_model(MODEL)

    def serving(context: int) -> bool:
        status = controller.status
        return (
            status.state == READY
            and status.model is not None
            and status.model.id == MODEL
            and status.context_length == context
        )

    qtbot.waitUntil(lambda: serving(2048), timeout=120000)
    pid = controller.status.worker_pid
    manager.installed.select(MODEL)
    qtbot.mouseClick(manager.installed.settings_button, Qt.MouseButton.LeftButton)
    dialog = manager.settings_dialog
    assert isinstance(dialog, ModelSettingsDialog)
    assert "is loaded: saving a new context length" in dialog.load_note.text()
    qtbot.keyClicks(dialog.fields["context_length"], "512")
    _save(qtbot, dialog)
    qtbot.waitUntil(lambda: serving(512), timeout=120000)
    assert controller.status.worker_pid != pid  # a new worker: the model was loaded again
    assert controller.status.model is not None
    assert controller.status.model.prefs.context_length == 512
