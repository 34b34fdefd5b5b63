"""Issue 26: remote servers' models in the desktop (desktop/controller.py remote_choices).

A second real ``sidelight serve`` (the demo model, behind its own key) is registered as the
remote ``box`` before the app starts. Its models appear in the chat's picker and the tray's
Models menu as ``MODEL@box — remote``; picking one sends the chat through the app's one
pipeline to the remote (nothing loads here), and its answer is what the second server gives
to the same conversation itself. Picking it in the tray makes it the model of new chats.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import openai
import pytest
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.controller import REMOTE_MARK
from engine.models import DEMO_MODEL_ID
from engine.remotes import add_remote, remotes_path
from engine.settings import load_settings
from tests.desktop.test_chat_model import pick
from tests.server.harness import ServerProcess, running_server

pytestmark = pytest.mark.slow

BOX_KEY = "box-key-0123456789"
REMOTE = f"{DEMO_MODEL_ID}@box"
PROMPT = "Say hello in a few words."


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The second server: the remote named ``box``, behind its own key."""
    with running_server(tmp_path_factory.mktemp("box"), None, "--api-key", BOX_KEY) as server:
        yield server


@pytest.fixture(scope="module")
def direct_text(box: ServerProcess) -> str:
    """What the second server itself answers to PROMPT (greedy, as the chat asks)."""
    with openai.OpenAI(base_url=f"{box.base_url}/v1", api_key=BOX_KEY, max_retries=0) as client:
        reply = client.chat.completions.create(
            model=DEMO_MODEL_ID,
            messages=[{"role": "user", "content": PROMPT}],
            temperature=0,
        )
    text = reply.choices[0].message.content or ""
    assert text
    return text


@pytest.fixture
def with_box(
    box: ServerProcess, make_desktop: Callable[..., DesktopApp], sidelight_home: Path
) -> DesktopApp:
    """A started app whose home lists ``box`` (as ``sidelight remote add`` writes it)."""
    add_remote(remotes_path(load_settings().paths.config_dir), "box", box.base_url, BOX_KEY)
    return make_desktop()


def test_the_picker_offers_the_remote_model_and_the_chat_reaches_it(
    qtbot: QtBot, with_box: DesktopApp, direct_text: str
) -> None:
    controller = with_box.controller
    window = with_box.chat
    window.show()
    # The catalog's refresher lists box's models; the controller's poll tells the picker.
    qtbot.waitUntil(lambda: window.model_picker.findData(REMOTE) >= 0, timeout=30000)
    index = window.model_picker.findData(REMOTE)
    assert window.model_picker.itemText(index) == f"{REMOTE}{REMOTE_MARK}"
    assert window.model_picker.findData(DEMO_MODEL_ID) >= 0  # the local model stays
    assert window.model_picker.currentData() == DEMO_MODEL_ID

    pick(window, REMOTE)
    assert window.chat_model == REMOTE
    with qtbot.waitSignal(window.reply_finished, timeout=120000) as finished:
        window.send(PROMPT)
    reply = window.conversation.messages[-1]
    assert reply["role"] == "assistant" and reply["model"] == REMOTE
    assert reply["content"] == direct_text
    assert finished.args[0].finish_reason in ("stop", "length")
    # Nothing was loaded for it here, and the default model did not move.
    assert REMOTE not in [m.id for m in controller.loaded_models()]
    assert controller.active_model_id == DEMO_MODEL_ID
    records = controller.monitor.log.entries()
    assert [(r.model, r.outcome) for r in records if r.model == REMOTE] == [(REMOTE, "ok")]


def test_the_tray_lists_the_remote_model_and_picking_it_answers_new_chats(
    qtbot: QtBot, with_box: DesktopApp
) -> None:
    controller = with_box.controller
    menu = with_box.tray.menu
    qtbot.waitUntil(lambda: controller.choice(REMOTE) is not None, timeout=30000)
    menu.aboutToShow.emit()  # what opening it does
    entries = {a.text(): a for a in menu.models_menu.actions() if not a.isSeparator()}
    entry = entries[f"{REMOTE}{REMOTE_MARK}"]
    assert entry.isCheckable() and not entry.isChecked()
    assert [t for t, a in entries.items() if a.isChecked()] == ["Demo model (tiny, offline)"]

    entry.trigger()
    assert controller.chat_default_id == REMOTE
    assert controller.active_model_id == DEMO_MODEL_ID  # the engine's default stays loaded
    window = with_box.chat
    window.new_chat()
    assert window.chat_model == REMOTE and window.model_picker.currentData() == REMOTE
    menu.aboutToShow.emit()
    checked = [a.text() for a in menu.models_menu.actions() if a.isChecked()]
    assert checked == [f"{REMOTE}{REMOTE_MARK}"]

    # A local model picked in the tray takes new chats back.
    demo = next(a for a in menu.models_menu.actions() if a.data() == DEMO_MODEL_ID)
    demo.trigger()
    assert controller.chat_default_id == DEMO_MODEL_ID
    window.new_chat()
    assert window.chat_model == DEMO_MODEL_ID
