"""The model manager against the local hub stand-in (the real hub is unreachable here):
download with progress, cancel, resume, then the model in the tray; import, use and delete;
conversion offered only where the tools are; messages in GUI words."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTreeWidget, QTreeWidgetItem
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.views.model_manager import CHECKING_TOOLS, ModelManager
from engine.models import DEMO_MODEL_ID
from engine.store import StoredModel
from engine.store.catalog import Catalog, MachineInfo
from engine.store.convert import ConvertRequest
from engine.store.store import PARTIAL
from engine.supervisor.states import READY
from tests.conftest import TINY_GGUF, TINY_MODEL
from tests.desktop.modal import answer_next_box
from tests.engine.gguf_builder import CRAFTED, load
from tests.store.conftest import read_only_folder, sidelight
from tests.store.hub_server import HubConfig, HubServer
from tests.store.test_convert import CONVERT_PYTHON, MAKE_CHECKPOINT

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
    item = _item(dialog.catalog_view, entry_id)
    return [item.text(c) for c in range(item.columnCount())]


def installed_row(dialog: ModelManager, model_id: str) -> list[str]:
    item = _item(dialog.installed.view, model_id)
    return [item.text(c) for c in range(item.columnCount())]


def is_bold(dialog: ModelManager, model_id: str) -> bool:
    return _item(dialog.installed.view, model_id).font(0).bold()


def _item(view: QTreeWidget, item_id: str) -> QTreeWidgetItem:
    for index in range(view.topLevelItemCount()):
        item = view.topLevelItem(index)
        if item is not None and item.data(0, Qt.ItemDataRole.UserRole) == item_id:
            return item
    raise LookupError(item_id)


def a_closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def import_tiny_gguf(qtbot: QtBot, dialog: ModelManager) -> StoredModel:
    with qtbot.waitSignal(dialog.job_finished, timeout=60000) as imported:
        dialog.import_gguf_file(TINY_GGUF)
    kind, stored = imported.args
    assert kind == "import" and isinstance(stored, StoredModel)
    return stored


def test_catalog_shows_sizes_and_what_fits(manager: tuple[DesktopApp, ModelManager]) -> None:
    _, dialog = manager
    assert dialog.catalog_view.topLevelItemCount() == len(dialog.catalog.entries)
    assert dialog.machine is not None
    row = catalog_row(dialog, ENTRY.id)
    assert re.fullmatch(r"\d+(\.\d)? (MB|GB)", row[1]) and row[2] == f"{ENTRY.memory_gb:g} GB"
    marks = {catalog_row(dialog, e.id)[3].split(" (")[0] for e in dialog.catalog.entries}
    assert "✓ fits" in marks
    recommended = dialog.catalog.recommend(dialog.machine)
    assert recommended is not None
    assert catalog_row(dialog, recommended.id)[3].endswith("(recommended)")
    # Issue 28, defect 8: an NPU build on a machine without an NPU said "✓ fits" alone.
    dialog.machine = MachineInfo(total_memory=64 * 2**30, device_kinds=frozenset({"CPU"}))
    dialog._fill_catalog()
    npu_builds = [e for e in dialog.catalog.entries if e.devices[0] == "NPU"]
    assert npu_builds
    for entry in npu_builds:
        assert catalog_row(dialog, entry.id)[3].endswith(" on CPU (made for NPU)"), entry.id
    others = [e for e in dialog.catalog.entries if e.devices[0] == "CPU"]
    assert all("made for" not in catalog_row(dialog, e.id)[3] for e in others)
    # A machine with 4 GB and no NPU sees big models and NPU builds refused.
    dialog.machine = MachineInfo(total_memory=4 * 2**30, device_kinds=frozenset({"CPU"}))
    dialog._fill_catalog()
    assert any(catalog_row(dialog, e.id)[3] == "✗ too big" for e in dialog.catalog.entries)


def test_installed_models_list_the_devices_this_machine_has(
    manager: tuple[DesktopApp, ModelManager],
) -> None:
    """Issue 28, defect 8: every installed model listed "CPU, GPU" on a machine with only a
    CPU. The column names the devices found here; the tooltip the ones the model could
    also use."""
    desktop, dialog = manager
    found = {d.kind.upper() for d in desktop.controller.devices or []}
    assert "CPU" in found
    demo = ("CPU", "GPU")  # the demo model's device families
    row = installed_row(dialog, DEMO_MODEL_ID)
    assert row[4] == ", ".join(d for d in demo if d in found)
    lacking = ", ".join(d for d in demo if d not in found)  # "GPU" here: no GPU in CI
    tip = f"Also runs on {lacking}, which this machine does not have." if lacking else ""
    assert _item(dialog.installed.view, DEMO_MODEL_ID).toolTip(4) == tip


def test_entries_to_convert_and_untried_entries_say_so(
    manager: tuple[DesktopApp, ModelManager],
) -> None:
    _, dialog = manager
    entry = next(e for e in dialog.catalog.entries if e.needs_conversion)
    assert catalog_row(dialog, entry.id)[4] == "Needs conversion"
    dialog.select_entry(entry.id)
    assert dialog.download_button.text() == "Convert"
    # Enabled exactly when the conversion tools were found (this venv may lack them).
    assert dialog.download_button.isEnabled() == (dialog.convert_problem is None)
    tooltip = _item(dialog.catalog_view, entry.id).toolTip(0)
    assert f"convert from {entry.repo}" in tooltip and entry.verified_note in tooltip
    assert catalog_row(dialog, ENTRY.id)[4] == "" and not ENTRY.needs_conversion


def test_download_progress_cancel_resume_and_use_from_the_tray(
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
        qtbot.wait(300)  # a report or two later: the speed is known
        progress = dialog.last_progress
        assert progress is not None and progress.total > progress.done
        # The bar moves, and the catalog row and the line under the bar give the figures.
        assert 0 < dialog.progress_bar.value() < 1000
        assert dialog.progress_bar.text() == f"{dialog.progress_bar.value() // 10}%"
        figures = r"\d+% · [\d.]+ KB of [\d.]+ KB · [\d.]+ KB/s · \d+ s left"
        assert re.fullmatch(figures, catalog_row(dialog, ENTRY.id)[4])
        assert re.fullmatch(f"Downloading {BIG_FILE}: {figures}", dialog.progress_label.text())
        dialog.cancel_button.click()
    assert first.args == ["download", "cancelled"]
    assert dialog.progress_label.text() == (
        f"The download of {ENTRY.name} was cancelled. Click Resume to continue where it stopped."
    )
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
    assert dialog.installed.view.topLevelItemCount() == 2  # the demo model and this one
    assert installed_row(dialog, DEMO_MODEL_ID)[0] == f"{DEMO_MODEL_ID} (in use)"
    assert installed_row(dialog, ENTRY.id)[0] == ENTRY.id
    assert dialog.installed.selected_id() == ENTRY.id  # ready for Use
    assert dialog.progress_label.text().endswith("Click Use to chat with it.")
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


def test_quitting_mid_download_asks_first_and_no_keeps_it_going(
    qtbot: QtBot, manager: tuple[DesktopApp, ModelManager]
) -> None:
    """Issue 28, defect 12: quitting mid-download gave no warning (and logged ``Signal source
    has been deleted``). Quit now asks; *No* leaves the download running."""
    from PySide6.QtWidgets import QMessageBox

    desktop, dialog = manager
    assert desktop.running_work() is None
    dialog.select_entry(ENTRY.id)

    with qtbot.waitSignal(dialog.job_finished, timeout=60000) as finished:
        dialog.download_button.click()
        qtbot.waitUntil(
            lambda: dialog.last_progress is not None and dialog.last_progress.done > 0,
            timeout=30000,
        )
        asked = answer_next_box(QMessageBox.StandardButton.No)
        desktop.quit()
        assert asked and asked[0].startswith("A model download or conversion is still running")
        assert dialog.busy and dialog.cancel_button.isEnabled()  # not quit, not cancelled
        dialog.cancel_button.click()
    assert finished.args == ["download", "cancelled"]
    assert desktop.running_work() is None


def test_sizes_read_as_people_say_them(
    qtbot: QtBot, manager: tuple[DesktopApp, ModelManager]
) -> None:
    _, dialog = manager
    stored = import_tiny_gguf(qtbot, dialog)
    assert TINY_GGUF.stat().st_size == 347_168
    assert installed_row(dialog, stored.id)[1:4] == ["gguf", "F16", "347 KB"]
    assert dialog.progress_label.text() == f"Added {stored.id} (347 KB). Click Use to chat with it."


def test_use_switches_the_model_and_the_one_in_use_cannot_be_deleted(
    qtbot: QtBot, manager: tuple[DesktopApp, ModelManager]
) -> None:
    desktop, dialog = manager
    controller = desktop.controller
    stored = import_tiny_gguf(qtbot, dialog)

    # The demo model serves: marked, and neither Use nor Delete is offered for it.
    assert installed_row(dialog, DEMO_MODEL_ID)[0] == f"{DEMO_MODEL_ID} (in use)"
    assert is_bold(dialog, DEMO_MODEL_ID) and not is_bold(dialog, stored.id)
    dialog.installed.select(DEMO_MODEL_ID)
    assert (
        not dialog.installed.use_button.isEnabled()
        and not dialog.installed.delete_button.isEnabled()
    )
    assert "in use: switch to another model first" in dialog.installed.delete_button.toolTip()

    # Use loads the selected model through the controller, as the tray does.
    dialog.installed.select(stored.id)
    assert dialog.installed.use_button.isEnabled() and dialog.installed.delete_button.isEnabled()
    dialog.installed.use_button.click()
    qtbot.waitUntil(
        lambda: controller.active_model_id == stored.id and controller.status.state == READY,
        timeout=60000,
    )
    qtbot.waitUntil(lambda: installed_row(dialog, stored.id)[0] == f"{stored.id} (in use)")
    assert is_bold(dialog, stored.id) and not is_bold(dialog, DEMO_MODEL_ID)
    assert installed_row(dialog, DEMO_MODEL_ID)[0] == DEMO_MODEL_ID
    # Refused up front: Delete is off, and says why.
    assert (
        not dialog.installed.delete_button.isEnabled()
        and not dialog.installed.use_button.isEnabled()
    )
    assert dialog.installed.delete_button.toolTip() == (
        f"{stored.id} is in use: switch to another model first."
    )
    dialog.delete_model(stored.id)  # a caller that skips the button is refused too
    assert controller.store.contains(stored.id) and not dialog.busy

    # Back to the demo model; now the GGUF can go.
    dialog.installed.select(DEMO_MODEL_ID)
    dialog.installed.use_button.click()
    qtbot.waitUntil(
        lambda: controller.active_model_id == DEMO_MODEL_ID and controller.status.state == READY,
        timeout=60000,
    )
    dialog.installed.select(stored.id)
    qtbot.waitUntil(dialog.installed.delete_button.isEnabled)
    with qtbot.waitSignal(dialog.job_finished, timeout=30000) as deleted:
        dialog.delete_model(stored.id)
    assert deleted.args == ["delete", None]
    assert not controller.store.contains(stored.id)
    assert [c.id for c in controller.models()] == [DEMO_MODEL_ID]


def test_failures_are_reported_in_the_dialog(
    qtbot: QtBot, manager: tuple[DesktopApp, ModelManager], hub: HubServer
) -> None:
    desktop, dialog = manager
    shutil.rmtree(hub.config.root / ENTRY.repo)  # the hub no longer has it
    with qtbot.waitSignal(dialog.job_finished, timeout=60000) as failed:
        dialog.download(ENTRY.id)
    kind, message = failed.args
    assert kind == "download" and isinstance(message, str) and ENTRY.repo in message
    assert dialog.progress_label.text() == f"Could not download {ENTRY.name}. {message}"
    assert desktop.controller.last_notification == ("Download failed", message, True)


def test_messages_are_sentences_for_the_gui(
    qtbot: QtBot, make_desktop: Callable[..., DesktopApp]
) -> None:
    """No network: the CLI says "run the same command again"; the dialog says what to do here."""
    desktop = make_desktop(hub_endpoint=f"http://127.0.0.1:{a_closed_port()}")
    dialog = desktop.models_dialog()
    with qtbot.waitSignal(dialog.job_finished, timeout=60000) as failed:
        dialog.download(ENTRY.id)
    message = failed.args[1]
    assert message == (
        "Cannot reach the model hub (no network?): check the connection, then try again; "
        "what was already downloaded is kept."
    )
    assert dialog.progress_label.text() == f"Could not download {ENTRY.name}. {message}"
    assert desktop.controller.last_notification == ("Download failed", message, True)


def test_hub_refusals_point_at_the_app_not_the_command_line(
    qtbot: QtBot, manager: tuple[DesktopApp, ModelManager], hub: HubServer, tiny_gguf: Path
) -> None:
    desktop, dialog = manager
    hub.config.gated.add(ENTRY.repo)
    with qtbot.waitSignal(dialog.job_finished, timeout=60000) as gated:
        dialog.download(ENTRY.id)
    settings_file = desktop.controller.settings.paths.config_file
    assert gated.args[1] == (
        f"{ENTRY.repo} is gated: sign in on the hub, accept the model's terms, and add a token "
        f'from your hub account settings as "hf_token" to the settings file {settings_file}.'
    )
    hub.config.gated.clear()
    shutil.rmtree(hub.config.root / ENTRY.repo)
    (hub.config.root / ENTRY.repo).mkdir()
    shutil.copy(tiny_gguf, hub.config.root / ENTRY.repo / "model-f16.gguf")
    with qtbot.waitSignal(dialog.job_finished, timeout=60000) as gguf:
        dialog.download(ENTRY.id)
    assert gguf.args[1] == (
        f"{ENTRY.repo} holds GGUF files, not an OpenVINO model: download the .gguf you want "
        "and add it with Import GGUF…"
    )


def test_store_errors_in_gui_words_while_the_cli_keeps_its_own(
    qtbot: QtBot, manager: tuple[DesktopApp, ModelManager], tmp_path: Path, sidelight_home: Path
) -> None:
    """A damaged GGUF and a read-only models folder, imported in the dialog and by the CLI."""
    desktop, dialog = manager
    damaged = tmp_path / "model.gguf"
    damaged.write_bytes(CRAFTED["data cut in half"][0](load(TINY_GGUF)))
    copy = tmp_path / "demo.gguf"
    shutil.copy(TINY_GGUF, copy)
    messages, cli_messages = [], []
    with read_only_folder(desktop.controller.store.root):
        for path in (damaged, copy):
            with qtbot.waitSignal(dialog.job_finished, timeout=30000) as failed:
                dialog.import_gguf_file(path)
            kind, message = failed.args
            assert kind == "import"
            assert dialog.progress_label.text() == f"Could not import {path.name}. {message}"
            messages.append(message)
            cli = sidelight(sidelight_home, "import", str(path))
            assert "Traceback" not in cli.stderr
            cli_messages.append(cli.stderr.strip().splitlines()[-1])
    assert messages[0].startswith("model.gguf is not a valid GGUF file: ")
    assert cli_messages[0] == f"sidelight: {messages[0].removesuffix('.')}"
    assert messages[1].startswith("Importing demo.gguf failed: ")
    assert messages[1].endswith("; choose another model folder in Settings.")
    assert cli_messages[1].startswith("sidelight: importing demo.gguf failed: ")
    assert cli_messages[1].endswith(
        "choose another models folder (SIDELIGHT_MODELS_DIR, or models_dir in the settings file)"
    )


def test_convert_is_off_when_the_tools_are_missing(
    qtbot: QtBot, manager: tuple[DesktopApp, ModelManager]
) -> None:
    """The app's own environment has no torch: say so on the button, before any input."""
    _, dialog = manager
    qtbot.waitUntil(lambda: dialog.convert_problem != CHECKING_TOOLS, timeout=30000)
    assert not dialog.convert_button.isEnabled()
    settings_file = dialog.controller.settings.paths.config_file
    assert dialog.convert_button.toolTip() == (
        "<p>Conversion is not available here: torch, transformers, optimum.intel, nncf are "
        "not installed. Install them with pip install 'sidelight[convert]', or set "
        f'"convert_python" in the settings file {settings_file} to a Python that has them.</p>'
    )


def test_convert_dialog_checks_the_source_and_converts_with_the_chosen_weights(
    qtbot: QtBot,
    make_desktop: Callable[..., DesktopApp],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """With the tools (``.venv-convert``): a hub id or a folder, a weights choice, checked
    as it is typed; then a real conversion of a tiny checkpoint."""
    if not CONVERT_PYTHON.exists():
        pytest.fail(f"{CONVERT_PYTHON} is missing: run `python3 packaging/dev.py test` once")
    checkpoint = tmp_path / "tiny-qwen2"
    subprocess.run(
        [str(CONVERT_PYTHON), str(MAKE_CHECKPOINT), str(checkpoint)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    monkeypatch.setenv("SIDELIGHT_CONVERT_PYTHON", str(CONVERT_PYTHON))
    desktop = make_desktop()
    dialog = desktop.models_dialog()
    dialog.show()
    qtbot.waitUntil(lambda: dialog.convert_problem is None, timeout=30000)
    assert dialog.convert_button.isEnabled()

    dialog.convert_button.click()
    form = dialog.convert_dialog
    assert form is not None and form.isVisible() and form.from_hub.isChecked()
    assert [form.weights.itemText(i) for i in range(form.weights.count())] == [
        "int4 (smallest, the usual choice)",
        "int8 (larger, closer to the original)",
        "fp16 (full size, for comparison)",
        "NPU (channel-wise int4)",
    ]
    assert not form.convert_button.isEnabled()  # nothing named yet
    qtbot.keyClicks(form.repo, "not a repo")
    assert not form.convert_button.isEnabled()
    assert form.problem.text() == "'not a repo' is neither a folder nor a hub repo id (org/name)."
    form.repo.clear()
    qtbot.keyClicks(form.repo, "Qwen/Qwen3-0.6B")
    assert form.convert_button.isEnabled() and form.problem.isHidden()
    qtbot.keyClicks(form.folder, str(tmp_path))  # typing a folder picks that source
    assert form.from_folder.isChecked() and not form.convert_button.isEnabled()
    assert form.problem.text() == f"{tmp_path} is not a transformers model folder (no config.json)."
    form.folder.setText(str(checkpoint))  # what Browse… fills in
    form.weights.setCurrentIndex(3)
    assert form.request() == ConvertRequest(source=str(checkpoint), weights="int4", npu=True)
    form.weights.setCurrentIndex(1)
    with qtbot.waitSignal(dialog.job_finished, timeout=300000) as converted:
        form.convert_button.click()
    kind, stored = converted.args
    assert kind == "convert" and isinstance(stored, StoredModel), stored
    assert stored.id == "tiny-qwen2-int8" and stored.manifest.weights == "int8"
    assert installed_row(dialog, stored.id)[1:3] == ["ir", "int8"]

    # Converting it again is refused before a job starts: the id is taken.
    dialog.convert_button.click()
    again = dialog.convert_dialog
    assert again is not None and again is not form
    again.folder.setText(str(checkpoint))
    again.from_folder.setChecked(True)
    again.weights.setCurrentIndex(1)
    assert not again.convert_button.isEnabled()
    assert (
        again.problem.text() == "A model 'tiny-qwen2-int8' is already installed; delete it first."
    )
    again.reject()
