"""The tray lists the models in memory and unloads one, on the real engine (the scheduler).

An embedding model is put into the test's store and loaded by a real request to the app's
server: it runs in an engine worker of its own beside the chat model; the tray's Models menu
(its "In memory" submenu) then lists both with their measured memory, and its Unload entry ends only that worker.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import psutil
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.tray import TrayMenu
from engine.models import DEMO_MODEL_ID
from tests.server.harness import store_embedding_model


def _entries(menu: TrayMenu) -> dict[str, str]:
    menu.aboutToShow.emit()  # what opening it does
    return {
        str(a.data()): a.text()
        for a in menu.loaded_menu.actions()
        if str(a.data() or "").startswith("unload:")
    }


def test_tray_lists_loaded_models_and_unloads_one(
    qtbot: QtBot, desktop: DesktopApp, sidelight_home: Path
) -> None:
    store_embedding_model(sidelight_home, "tiny-embed")
    url = f"{desktop.controller.server_url}/v1/embeddings"
    response = httpx.post(url, json={"model": "tiny-embed", "input": ["hi"]}, timeout=120)
    assert response.status_code == 200, response.text
    loaded = {m.id: m for m in desktop.controller.loaded_models()}
    embed_pid = loaded["tiny-embed"].worker_pid
    assert embed_pid is not None and embed_pid != loaded[DEMO_MODEL_ID].worker_pid

    menu = desktop.tray.menu
    entries = _entries(menu)
    # The session's engine is shared: models earlier tests loaded may be listed too.
    others = {f"unload:{m}" for m in loaded if m != "tiny-embed"}
    assert f"unload:{DEMO_MODEL_ID}" in others
    assert set(entries) == others | {"unload:tiny-embed"}
    assert entries["unload:tiny-embed"].startswith("Unload tiny-embed  (")
    assert "MB, CPU)" in entries["unload:tiny-embed"]

    with qtbot.waitSignal(desktop.controller.models_changed, timeout=30000):
        menu.find_action(menu.loaded_menu, "unload:tiny-embed").trigger()
    assert "tiny-embed" not in {m.id for m in desktop.controller.loaded_models()}
    assert not psutil.pid_exists(embed_pid) or (
        psutil.Process(embed_pid).status() == psutil.STATUS_ZOMBIE
    )
    assert set(_entries(menu)) == others
    assert desktop.controller.status.state == "ready"  # the chat model was not touched


def test_in_memory_opens_beside_models_not_over_it(qtbot: QtBot, desktop: DesktopApp) -> None:
    """Issue 28, defect 12: *In memory* was a submenu of *Models*; with the tray at a
    screen edge, Models opens leftwards and In memory had only the room over its parent.
    It is now an entry of the tray menu itself, beside Models."""
    menu = desktop.tray.menu
    menu.aboutToShow.emit()
    assert desktop.controller.loaded_models()  # the demo model, at least
    top = menu.actions()
    assert menu.loaded_menu.menuAction() in top
    assert top.index(menu.loaded_menu.menuAction()) == top.index(menu.models_menu.menuAction()) + 1
    assert menu.loaded_menu.menuAction() not in menu.models_menu.actions()
    assert menu.loaded_menu.parent() is menu
