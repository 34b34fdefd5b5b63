"""Changing the model folder keeps the picker, the tray and the API on one model (issue 28, 1).

Seen before: Settings -> Model folder -> an empty folder -> Save left the old folder's model
loaded and answering (the tray said "Ready: qwen2.5", ``/v1/models`` listed it, a chat with
the picker on *Demo* was answered by it) while ``sidelight-demo`` was a 404 on the API; after
switching back the demo model stayed a 404 though the window listed it. A real app over the
shared engine, the settings dialog as a person uses it, and the API over HTTP.
"""

from __future__ import annotations

from pathlib import Path

import httpx
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from engine.models import DEMO_MODEL_ID
from engine.supervisor.states import READY
from tests.conftest import TINY_CODER
from tests.desktop.test_settings_dialog import open_settings
from tests.server.harness import store_ir_copy

CODER = "tiny-coder"


def _model_ids(url: str) -> set[str]:
    return {m["id"] for m in httpx.get(f"{url}/v1/models", timeout=30).json()["data"]}


def _answered_by(url: str, model: str) -> tuple[int, str | None]:
    reply = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        timeout=120,
    )
    return reply.status_code, reply.json().get("model") if reply.status_code == 200 else None


def _save_folder(qtbot: QtBot, desktop: DesktopApp, folder: Path) -> None:
    dialog = open_settings(desktop)
    dialog.models_dir.set_path(folder)
    with qtbot.waitSignal(desktop.controller.server_changed, timeout=30000):
        dialog.save()


def _serves(desktop: DesktopApp, model_id: str) -> bool:
    status = desktop.controller.status
    return status.state == READY and status.model is not None and status.model.id == model_id


def test_a_new_model_folder_serves_only_what_the_picker_shows(
    qtbot: QtBot, desktop: DesktopApp, tmp_path: Path
) -> None:
    controller = desktop.controller
    first = controller.store.root
    store_ir_copy(first, CODER, TINY_CODER, task="chat", reasoning=False)
    controller.refresh_models()
    controller.select_model(CODER)
    qtbot.waitUntil(lambda: _serves(desktop, CODER), timeout=120000)
    url = controller.server_url
    assert url is not None
    assert _answered_by(url, DEMO_MODEL_ID)[0] == 200  # the demo is served beside it

    empty = tmp_path / "empty-models"
    _save_folder(qtbot, desktop, empty)
    # The old folder's model is unloaded; the demo model becomes the default.
    qtbot.waitUntil(lambda: _serves(desktop, DEMO_MODEL_ID), timeout=120000)
    url = controller.server_url
    assert url is not None
    assert [m.id for m in controller.models()] == [DEMO_MODEL_ID]
    assert CODER not in {m.id for m in controller.loaded_models()}
    assert _model_ids(url) == {DEMO_MODEL_ID}
    assert _answered_by(url, DEMO_MODEL_ID) == (200, DEMO_MODEL_ID)
    assert _answered_by(url, CODER)[0] == 404

    _save_folder(qtbot, desktop, first)
    url = controller.server_url
    assert url is not None
    assert {m.id for m in controller.models()} == {DEMO_MODEL_ID, CODER}
    assert _model_ids(url) == {DEMO_MODEL_ID, CODER}
    assert _answered_by(url, DEMO_MODEL_ID) == (200, DEMO_MODEL_ID)
    assert _serves(desktop, DEMO_MODEL_ID)  # the demo was no model of either folder: it stays
