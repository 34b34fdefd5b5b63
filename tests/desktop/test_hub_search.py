"""The model manager's hub search as a person uses it: type, wait, pick a result, see its
size and fit, pick a GGUF file, download it; and an unreachable hub said in one line.

The hub is the local stand-in (the real one is unreachable here) spoken to by the real
``huggingface_hub`` client; the download lands in the real store and the model is served by
the real engine's GGUF reader when used."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.views.hub_search import SEARCHING
from desktop.views.model_manager import ModelManager
from engine.store import StoredModel
from engine.store.catalog import GB, MachineInfo
from tests.desktop.test_model_manager import ENTRY, a_closed_port
from tests.store.hub_server import HubServer
from tests.store.search_fixtures import GGUF_REPO, POPULAR_OV, Q4, QUIET_OV


@pytest.fixture
def dialog(
    qtbot: QtBot, make_desktop: Callable[..., DesktopApp], search_hub_server: HubServer
) -> ModelManager:
    desktop = make_desktop(hub_endpoint=search_hub_server.url)
    manager = desktop.models_dialog()
    qtbot.waitUntil(lambda: manager.machine is not None, timeout=15000)
    manager.show()
    manager.tabs.setCurrentWidget(manager.search)
    return manager


def rows(dialog: ModelManager) -> list[list[str]]:
    view = dialog.search.view
    return [
        [view.topLevelItem(i).text(c) for c in range(view.columnCount())]  # type: ignore[union-attr]
        for i in range(view.topLevelItemCount())
    ]


def test_type_pick_a_gguf_file_and_download_it(
    qtbot: QtBot, dialog: ModelManager, search_hub_server: HubServer
) -> None:
    search = dialog.search
    with qtbot.waitSignal(search.searched, timeout=15000):
        qtbot.keyClicks(search.box, "tiny-chat")
        assert search.debounce.isActive()  # waits for a pause in typing
        qtbot.waitUntil(lambda: search.status.text() == SEARCHING, timeout=5000)
    searches = [p for _, p, _ in search_hub_server.config.requests if p == "/api/models"]
    assert len(searches) == 2  # one per kind for the whole word, not one per key
    assert search.status.text() == "3 models for “tiny-chat”."
    assert [r[:3] for r in rows(dialog)] == [
        [GGUF_REPO, "GGUF", "2,500"],
        [POPULAR_OV, "OpenVINO", "900"],
        [QUIET_OV, "OpenVINO", "40"],
    ]
    assert not search.download_button.isEnabled()  # nothing chosen yet

    with qtbot.waitSignal(search.sized, timeout=15000):
        search.select(GGUF_REPO)
    assert search.file_picker.isVisible()
    assert search.file_picker.currentData() == Q4
    assert search.file_picker.count() == 2  # the vision projector is not offered
    assert rows(dialog)[0][3:] == ["347 KB", "✓ fits"]
    assert search.status.text().startswith(f"{GGUF_REPO}: {Q4}, 347 KB; needs about ")
    search.file_picker.setCurrentIndex(search.file_picker.findData("tiny-chat-Q8_0.gguf"))
    assert search.current is not None and search.current.gguf_file == "tiny-chat-Q8_0.gguf"
    search.file_picker.setCurrentIndex(search.file_picker.findData(Q4))

    # A small machine: the same file is too big, and Download says why it is off.
    search.set_machine(MachineInfo(total_memory=1 * GB, device_kinds=frozenset({"CPU"})))
    assert rows(dialog)[0][4] == "✗ too big" and not search.download_button.isEnabled()
    assert search.download_button.toolTip().startswith("Not on this machine: needs about ")
    assert dialog.machine is not None
    search.set_machine(dialog.machine)

    with qtbot.waitSignal(dialog.job_finished, timeout=60000) as finished:
        search.download_button.click()
        assert not search.download_button.isEnabled()  # one job at a time
    kind, stored = finished.args
    assert kind == "download" and isinstance(stored, StoredModel), stored
    assert stored.id == "tiny-chat-q4_k_m" and stored.manifest.format == "gguf"
    assert dialog.installed.selected_id() == stored.id
    assert dialog.progress_label.text().endswith("Click Use to chat with it.")


def test_an_unreachable_hub_is_one_line_and_the_catalog_still_works(
    qtbot: QtBot, dialog: ModelManager
) -> None:
    search = dialog.search
    search.endpoint = f"http://127.0.0.1:{a_closed_port()}"
    with qtbot.waitSignal(search.searched, timeout=15000):
        qtbot.keyClicks(search.box, "qwen")
        qtbot.keyClick(search.box, Qt.Key.Key_Return)  # Enter searches at once
    assert search.status.text() == (
        "Cannot reach the model hub (no network?); the catalog still works."
    )
    assert search.status.property("role") == "error" and rows(dialog) == []
    dialog.tabs.setCurrentIndex(0)
    dialog.select_entry(ENTRY.id)
    assert dialog.download_button.isEnabled()
    assert dialog.catalog_view.topLevelItemCount() == len(dialog.catalog.entries)


def test_a_mirror_without_search_says_so_and_opens_a_repo_id(
    qtbot: QtBot, dialog: ModelManager, search_hub_server: HubServer
) -> None:
    """The hub stand-in as a mirror: repos served, the model listing 404 (as a mirror
    without the search API answers)."""
    search_hub_server.config.search = False
    search = dialog.search
    with qtbot.waitSignal(search.searched, timeout=15000):
        qtbot.keyClicks(search.box, "tiny")
        qtbot.keyClick(search.box, Qt.Key.Key_Return)
    assert search.status.text() == (
        "This hub mirror does not offer search; type a repository id (owner/name) to open it."
    )
    assert "missing" not in search.status.text()
    assert search.status.property("role") == "error" and rows(dialog) == []

    search.box.clear()
    with qtbot.waitSignal(search.sized, timeout=15000):
        qtbot.keyClicks(search.box, GGUF_REPO)
        qtbot.keyClick(search.box, Qt.Key.Key_Return)
    assert [r[:2] for r in rows(dialog)] == [[GGUF_REPO, "GGUF"]]
    assert search.current is not None and search.current.gguf_file == Q4
    assert search.status.text().startswith(f"{GGUF_REPO}: {Q4}, 347 KB; needs about ")
    assert search.download_button.isEnabled()

    search.box.clear()
    with qtbot.waitSignal(search.searched, timeout=15000):
        qtbot.keyClicks(search.box, "nobody/no-such-model")
        qtbot.keyClick(search.box, Qt.Key.Key_Return)
    assert search.status.text().startswith(
        "This hub mirror does not offer search, and no model repo named 'nobody/no-such-model'"
    )
    assert rows(dialog) == []
