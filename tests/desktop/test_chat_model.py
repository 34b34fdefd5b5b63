"""Issue 28, defect 10: the chat's model picker is per chat.

Seen before: switching the picker in one chat switched the tray's (the default) model, and
reopening an older chat did not bring back the model it used. Now a chat answers with its own
model beside the default one (a worker of its own), remembers it, gets it back when reopened,
and says so when that model is no longer installed, falling back to the default model.
"""

from __future__ import annotations

import shutil

from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.views.chat_window import ChatWindow
from engine.models import DEMO_MODEL_ID
from tests.conftest import TINY_CODER
from tests.server.harness import store_ir_copy

CODER = "tiny-coder"


def pick(window: ChatWindow, model_id: str) -> None:
    """What choosing an entry of the picker does."""
    index = window.model_picker.findData(model_id)
    assert index >= 0, model_id
    window.model_picker.setCurrentIndex(index)
    window.model_picker.activated.emit(index)


def test_each_chat_keeps_its_own_model_and_the_default_stays(
    qtbot: QtBot, desktop: DesktopApp
) -> None:
    controller = desktop.controller
    store_ir_copy(controller.store.root, CODER, TINY_CODER, task="chat", reasoning=False)
    controller.refresh_models()
    window = desktop.chat
    window.show()
    assert window.model_picker.currentData() == DEMO_MODEL_ID

    pick(window, CODER)
    assert window.chat_model == CODER
    with qtbot.waitSignal(window.reply_finished, timeout=120000):
        window.send("Hello")
    first = window.conversation
    assert first.messages[-1]["role"] == "assistant"
    assert first.messages[-1]["model"] == CODER  # answered by the chat's model
    # The default (tray's) model did not move.
    assert controller.active_model_id == DEMO_MODEL_ID
    assert controller.state.last_model != CODER  # not remembered as the next start's model

    window.new_chat()
    assert window.model_picker.currentData() == DEMO_MODEL_ID  # a new chat: the default
    window.open_conversation(first.id)
    assert window.model_picker.currentData() == CODER  # its own model back
    saved = desktop.history.get(first.id)
    assert saved is not None and saved.model == CODER

    # The model goes away: reopening the chat says so and falls back visibly.
    controller.runtime.scheduler.unload(CODER, "test")
    shutil.rmtree(controller.store.root / CODER)
    controller.refresh_models()
    window.new_chat()
    window.open_conversation(first.id)
    assert window.model_picker.currentData() == DEMO_MODEL_ID
    assert window.chat_model == DEMO_MODEL_ID
    assert window.notice.isVisible()
    assert f"{CODER}, the model this chat used, is no longer installed" in window.notice.text
    assert "Demo model" in window.notice.text
