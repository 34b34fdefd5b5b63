"""A model picked in the tray loads with its own settings (``sidelight settings``), as the
API's loads do: its context cap sizes the KV cache the status reports. A real app and engine."""

from __future__ import annotations

from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from engine.supervisor.states import READY
from tests.conftest import TINY_CODER
from tests.server.harness import store_ir_copy

CODER = "tiny-coder"


def test_a_model_picked_in_the_tray_loads_with_its_own_context(
    qtbot: QtBot, desktop: DesktopApp
) -> None:
    controller = desktop.controller
    store_ir_copy(controller.store.root, CODER, TINY_CODER, task="chat", reasoning=False)
    controller.store.set_prefs(CODER, {"context_length": 512})
    controller.refresh_models()
    controller.select_model(CODER)

    def loaded() -> bool:
        status = controller.status
        return status.state == READY and status.model is not None and status.model.id == CODER

    qtbot.waitUntil(loaded, timeout=120000)
    assert controller.status.context_length == 512
    assert controller.status.model is not None
    assert controller.status.model.prefs.context_length == 512
