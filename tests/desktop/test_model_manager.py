"""The model manager against the local hub stand-in (the real hub is unreachable here):
download with progress, cancel, resume, then the model in the tray; import and delete."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.views.model_manager import ModelManager
from engine.store import StoredModel
from engine.store.catalog import Catalog, MachineInfo
from engine.store.store import PARTIAL
from tests.conftest import TINY_GGUF, TINY_MODEL
from tests.engine.gguf_builder import CRAFTED, load
from tests.store.conftest import read_only_folder, sidelight
from tests.store.hub_server import HubConfig, HubServer

ENTRY = Catalog.load().entries[0]  # served by the stand-in with the tiny model's files
BIG_FILE = "openvino_model.bin"


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[HubServer]:
    root = tmp_path / "hub"
    shutil.copytree(TINY_MODEL, root / ENTRY.repo)
    with HubServer(HubConfig(root=root, bytes_per_second=150_000)) as server:
        yield server


@pytest.fixture
def manager(
    qtbot: QtBot, make_desktop: Callable[..., DesktopApp], hub: HubServer
) -> tuple[DesktopApp, ModelManager]:
    desktop = make_desktop(hub_endpoint=hub.url)
    dialog = desktop.models_dialog()
    qtbot.waitUntil(lambda: dialog.machine is not None, timeout=15000)
    dialog.show()
    return desktop, dialog


def catalog_row(dialog: ModelManager, entry_id: str) -> list[str]:
    for index in range(dialog.catalog_view.topLevelItemCount()):
        item = dialog.catalog_view.topLevelItem(index)
        assert item is not None
        if item.data(0, 0x0100) == entry_id:  # Qt.UserRole
            return [item.text(c) for c in range(item.columnCount())]
    raise LookupError(entry_id)


def test_catalog_shows_sizes_and_what_fits(manager: tuple[DesktopApp, ModelManager]) -> None:
    _, dialog = manager
    assert dialog.catalog_view.topLevelItemCount() == len(dialog.catalog.entries)
    assert dialog.machine is not None
    row = catalog_row(dialog, ENTRY.id)
    assert row[1] == f"{ENTRY.download_gb:.2f} GB" and row[2] == f"{ENTRY.memory_gb:g} GB"
    marks = {catalog_row(dialog, e.id)[3].split(" (")[0] for e in dialog.catalog.entries}
    assert "✓ fits" in marks
    recommended = dialog.catalog.recommend(dialog.machine)
    assert recommended is not None
    assert catalog_row(dialog, recommended.id)[3].endswith("(recommended)")
    # A machine with 4 GB and no NPU sees big models and NPU builds refused.
    dialog.machine = MachineInfo(total_memory=4 * 2**30, device_kinds=frozenset({"CPU"}))
    dialog._fill_catalog()
    assert any(catalog_row(dialog, e.id)[3] == "✗ too big" for e in dialog.catalog.entries)


def test_download_cancel_resume_and_use_from_the_tray(
    qtbot: QtBot, manager: tuple[DesktopApp, ModelManager], hub: HubServer
) -> None:
    desktop, dialog = manager
    store = desktop.controller.store
    dialog.select_entry(ENTRY.id)
    assert dialog.download_button.text() == "Download" and dialog.download_button.isEnabled()

    with qtbot.waitSignal(dialog.job_finished, timeout=60000) as first:
        dialog.download_button.click()
        assert dialog.cancel_button.isEnabled() and not dialog.download_button.isEnabled()
        qtbot.waitUntil(
            lambda: dialog.last_progress is not None and dialog.last_progress.done > 100_000,
            timeout=30000,
        )
        progress = dialog.last_progress
        assert progress is not None and progress.total > progress.done
        assert "of" in dialog.progress_label.text() and "/s" in dialog.progress_label.text()
        assert 0 < dialog.progress_bar.value() < 1000
        dialog.cancel_button.click()
    assert first.args == ["download", "cancelled"]
    assert "cancelled" in dialog.progress_label.text()
    assert not store.contains(ENTRY.id)
    assert (store.root / PARTIAL / ENTRY.id).exists()  # kept for resuming
    assert catalog_row(dialog, ENTRY.id)[4] == "Partly downloaded"
    dialog.select_entry(ENTRY.id)
    assert dialog.download_button.text() == "Resume"

    hub.config.bytes_per_second = None
    with qtbot.waitSignal(dialog.job_finished, timeout=60000) as second:
        dialog.download_button.click()
    kind, stored = second.args
    assert kind == "download" and isinstance(stored, StoredModel)
    assert stored.id == ENTRY.id and store.contains(ENTRY.id)
    resumed = [
        rng
        for method, path, rng in hub.config.requests
        if method == "GET" and path.endswith(BIG_FILE) and rng
    ]
    assert resumed, "the second download should continue with a Range request"
    assert catalog_row(dialog, ENTRY.id)[4] == "Installed"
    assert dialog.installed_view.topLevelItemCount() == 1
    assert desktop.controller.last_notification == (
        "Model ready",
        f"{ENTRY.id} was added",
        False,
    )

    # The tray offers it at once.
    menu = desktop.tray.menu
    menu.aboutToShow.emit()
    action = menu.find_action(menu.models_menu, ENTRY.id)
    assert action.text() == f"{ENTRY.name} ({ENTRY.id})"


def test_import_gguf_and_delete(qtbot: QtBot, manager: tuple[DesktopApp, ModelManager]) -> None:
    desktop, dialog = manager
    with qtbot.waitSignal(dialog.job_finished, timeout=60000) as imported:
        dialog.import_gguf_file(TINY_GGUF)
    kind, stored = imported.args
    assert kind == "import" and isinstance(stored, StoredModel)
    assert [c.id for c in desktop.controller.models()] == ["sidelight-demo", stored.id]

    # The model being served cannot be deleted; another one can.
    dialog.delete_model("sidelight-demo")
    assert "in use" in dialog.progress_label.text()
    with qtbot.waitSignal(dialog.job_finished, timeout=30000) as deleted:
        dialog.delete_model(stored.id)
    assert deleted.args == ["delete", None]
    assert not desktop.controller.store.contains(stored.id)
    assert [c.id for c in desktop.controller.models()] == ["sidelight-demo"]


def test_failures_are_reported_in_the_dialog(
    qtbot: QtBot, manager: tuple[DesktopApp, ModelManager], hub: HubServer
) -> None:
    desktop, dialog = manager
    shutil.rmtree(hub.config.root / ENTRY.repo)  # the hub no longer has it
    with qtbot.waitSignal(dialog.job_finished, timeout=60000) as failed:
        dialog.download(ENTRY.id)
    kind, message = failed.args
    assert kind == "download" and isinstance(message, str) and ENTRY.repo in message
    assert ENTRY.repo in dialog.progress_label.text()
    assert desktop.controller.last_notification is not None
    assert desktop.controller.last_notification[0] == "Download failed"


def test_store_errors_read_as_the_cli_says_them(
    qtbot: QtBot, manager: tuple[DesktopApp, ModelManager], tmp_path: Path, sidelight_home: Path
) -> None:
    """A damaged GGUF and a read-only models folder: the dialog shows the CLI's sentence."""
    desktop, dialog = manager
    damaged = tmp_path / "model.gguf"
    damaged.write_bytes(CRAFTED["data cut in half"][0](load(TINY_GGUF)))
    copy = tmp_path / "demo.gguf"
    shutil.copy(TINY_GGUF, copy)
    messages = []
    with read_only_folder(desktop.controller.store.root):
        for path in (damaged, copy):
            with qtbot.waitSignal(dialog.job_finished, timeout=30000) as failed:
                dialog.import_gguf_file(path)
            kind, message = failed.args
            messages.append(message)
            cli = sidelight(sidelight_home, "import", str(path))
            assert (
                kind == "import" and cli.stderr.strip().splitlines()[-1] == f"sidelight: {message}"
            )
            assert dialog.progress_label.text() == f"{path.name}: {message}"
            assert "Traceback" not in cli.stderr
    assert messages[0].startswith("model.gguf is not a valid GGUF file: ")
    assert messages[1].startswith("importing demo.gguf failed: ")
    assert "choose another models folder" in messages[1]
