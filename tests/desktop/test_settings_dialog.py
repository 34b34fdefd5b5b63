"""The Settings dialog writes config.json, applies it (the server moves) and switches
start at login; the autostart writers for Linux and Windows."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QApplication, QDialogButtonBox, QLineEdit, QWidget
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.autostart import (
    RUN_VALUE,
    WindowsRunKey,
    XdgAutostart,
    launch_command,
    set_enabled,
)
from desktop.views.settings_dialog import LOOPBACK_HINT, SettingsDialog
from engine.settings import SettingsError, load_settings, save_config


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def open_settings(desktop: DesktopApp) -> SettingsDialog:
    desktop.show_settings()
    assert desktop._settings is not None
    return desktop._settings


def test_save_writes_config_and_moves_the_server(
    qtbot: QtBot, desktop: DesktopApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SIDELIGHT_PORT")  # the fixture's "any free port" would win over config
    dialog = open_settings(desktop)
    assert dialog.host.text() == "127.0.0.1"
    assert not dialog.start_at_login.isChecked()  # opt-in
    port = free_port()
    dialog.port.setValue(port)
    dialog.origins.setPlainText("https://chat\\.example\\.org")
    dialog.models_dir.set_path(tmp_path / "my-models")
    with qtbot.waitSignal(desktop.controller.server_changed, timeout=15000):
        dialog.save()
    assert not dialog.isVisible()

    config = json.loads(desktop.controller.settings.paths.config_file.read_text())
    assert config["port"] == port and config["host"] == "127.0.0.1"
    assert config["allowed_origins"] == ["https://chat\\.example\\.org"]
    assert config["models_dir"] == str(tmp_path / "my-models")
    assert "api_key" not in config
    # What the app now runs with is what load_settings reads back.
    settings = desktop.controller.settings
    assert settings.port == port
    assert settings.paths.models_dir == tmp_path / "my-models"
    assert desktop.controller.store.root == tmp_path / "my-models"
    assert desktop.controller.server_url == f"http://127.0.0.1:{port}"
    health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)
    assert health.json()["status"] == "ready"
    cors = httpx.options(
        f"http://127.0.0.1:{port}/v1/models",
        headers={
            "Origin": "https://chat.example.org",
            "Access-Control-Request-Method": "GET",
        },
        timeout=10,
    )
    assert cors.headers.get("access-control-allow-origin") == "https://chat.example.org"


def test_leaving_loopback_requires_an_api_key(desktop: DesktopApp) -> None:
    dialog = open_settings(desktop)
    dialog.host.setText("0.0.0.0")
    assert not dialog.warning.isHidden()
    assert "Set an API key first" in dialog.warning.text()
    dialog.save()
    assert dialog.isVisible()
    assert "API key" in dialog.error.text()
    assert not desktop.controller.settings.paths.config_file.exists()
    dialog.api_key.setText("a-long-secret-key")
    assert "Set an API key first" not in dialog.warning.text()
    dialog.reject()


def test_every_interface_with_a_key_serves_the_lan_and_copies_a_reachable_url(
    qtbot: QtBot, desktop: DesktopApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect 3: Settings -> bind 0.0.0.0 -> key -> Save served every LAN request a 403,
    and *Copy API URL* copied http://0.0.0.0:.... A LAN client is simulated by its Host
    header (the machine has no second computer to send from)."""
    monkeypatch.delenv("SIDELIGHT_PORT")
    port = free_port()
    dialog = open_settings(desktop)
    dialog.host.setText("0.0.0.0")
    dialog.port.setValue(port)
    dialog.generate_key.click()
    key = dialog.api_key.text()
    with qtbot.waitSignal(desktop.controller.server_changed, timeout=15000):
        dialog.save()
    assert not dialog.isVisible()

    lan = {"Host": f"192.168.1.20:{port}", "Authorization": f"Bearer {key}"}
    answer = httpx.get(f"http://127.0.0.1:{port}/v1/models", headers=lan, timeout=10)
    assert answer.status_code == 200, answer.text
    no_key = httpx.get(f"http://127.0.0.1:{port}/v1/models", headers={"Host": lan["Host"]})
    assert no_key.status_code == 401  # the key guards instead
    menu = desktop.tray.menu
    menu.rebuild()
    copy = next(a for a in menu.actions() if a.text().startswith("Copy API URL"))
    copy.trigger()
    assert QApplication.clipboard().text() == f"http://127.0.0.1:{port}/v1"


def test_a_port_in_use_keeps_the_dialog_the_old_server_and_the_old_config(
    qtbot: QtBot, desktop: DesktopApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SIDELIGHT_PORT")
    controller = desktop.controller
    old_url, old_settings = controller.server_url, controller.settings
    config_file = old_settings.paths.config_file
    save_config(old_settings.paths, {"device": "CPU"})  # a config the person had
    before = config_file.read_bytes()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy_port = taken.getsockname()[1]
        dialog = open_settings(desktop)
        dialog.port.setValue(busy_port)
        dialog.save()
        qtbot.waitUntil(lambda: dialog.error.text() != "", timeout=15000)

    assert dialog.isVisible()
    assert f"Port {busy_port} on 127.0.0.1 is already in use" in dialog.error.text()
    assert f"still serves at {old_url}/v1" in dialog.error.text()
    assert "--port" not in dialog.error.text()
    assert dialog.buttons.button(QDialogButtonBox.StandardButton.Save).isEnabled()
    # The old server still answers, and nothing was changed or kept.
    assert controller.server_url == old_url and controller.server_error is None
    assert httpx.get(f"{old_url}/health", timeout=10).json()["status"] == "ready"
    assert controller.settings is old_settings
    assert config_file.read_bytes() == before
    assert json.loads(config_file.read_text()) == {"device": "CPU"}

    # The error goes once the input changes; a free port then works.
    port = free_port()
    dialog.port.setValue(port)
    assert dialog.error.isHidden()
    with qtbot.waitSignal(controller.server_changed, timeout=15000):
        dialog.save()
    assert not dialog.isVisible()
    assert controller.server_url == f"http://127.0.0.1:{port}"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{old_url}/health", timeout=5)  # the old server stopped only then


def test_a_new_key_on_the_same_port_restarts_the_server_there(
    qtbot: QtBot, desktop: DesktopApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SIDELIGHT_PORT")
    controller, port = desktop.controller, free_port()
    dialog = open_settings(desktop)
    dialog.port.setValue(port)
    with qtbot.waitSignal(controller.server_changed, timeout=15000):
        dialog.save()
    url = f"http://127.0.0.1:{port}"
    assert httpx.get(f"{url}/v1/models", timeout=10).status_code == 200

    dialog = open_settings(desktop)
    dialog.api_key.setText("k" * 24)  # the port stays: the old server lets go of it first
    with qtbot.waitSignal(controller.server_changed, timeout=15000):
        dialog.save()
    assert not dialog.isVisible() and controller.server_url == url
    assert httpx.get(f"{url}/v1/models", timeout=10).status_code == 401
    headers = {"Authorization": "Bearer " + "k" * 24}
    assert httpx.get(f"{url}/v1/models", headers=headers, timeout=10).status_code == 200


def test_the_api_key_can_be_shown_and_copied(desktop: DesktopApp) -> None:
    dialog = open_settings(desktop)
    assert dialog.api_key.echoMode() == QLineEdit.EchoMode.Password
    assert dialog.api_key.text() == ""  # no key yet: nothing to show or copy
    assert not dialog.copy_key.isEnabled() and not dialog.show_key.isEnabled()
    dialog.generate_key.click()
    assert dialog.copy_key.isEnabled() and dialog.show_key.isEnabled()
    key = dialog.api_key.text()
    assert len(key) >= 24
    assert dialog.api_key.echoMode() == QLineEdit.EchoMode.Normal  # a new key is shown
    dialog.show_key.click()
    assert dialog.api_key.echoMode() == QLineEdit.EchoMode.Password
    assert dialog.show_key.text() == "Show"
    dialog.copy_key.click()
    assert QApplication.clipboard().text() == key
    assert dialog.copy_key.text() == "Copied"
    dialog.reject()


def test_errors_use_plain_words_and_go_when_the_input_changes(desktop: DesktopApp) -> None:
    dialog = open_settings(desktop)
    dialog.host.setText("0.0.0.0")
    dialog.save()
    text = dialog.error.text()
    assert dialog.isVisible() and not dialog.error.isHidden()
    assert "API key" in text and "Generate" in text
    for cli in ("--api-key", "SIDELIGHT_API_KEY", "--port"):
        assert cli not in text
    dialog.api_key.setText("a-long-secret-key")
    assert dialog.error.isHidden() and dialog.error.text() == ""
    dialog.reject()


def test_the_dialog_grows_so_nothing_is_clipped(qtbot: QtBot, desktop: DesktopApp) -> None:
    dialog = open_settings(desktop)
    qtbot.waitExposed(dialog)

    def whole(widget: QWidget) -> bool:
        top_left = widget.mapTo(dialog, QPoint(0, 0))
        return dialog.rect().contains(QRect(top_left, widget.size()))

    dialog.host.setText("0.0.0.0")  # the two-line warning appears
    qtbot.wait(10)
    warning = dialog.warning
    assert warning.isVisible()
    assert warning.height() >= warning.heightForWidth(warning.width())
    assert whole(warning) and whole(dialog.origins)
    below = dialog.origins.mapTo(dialog, QPoint(0, 0)).y()
    assert below >= warning.mapTo(dialog, QPoint(0, 0)).y() + warning.height()
    dialog.save()  # and the error under the rows
    qtbot.wait(10)
    assert dialog.error.isVisible() and whole(dialog.error)
    assert dialog.error.height() >= dialog.error.heightForWidth(dialog.error.width())
    buttons = dialog.buttons
    assert whole(buttons) and buttons.mapTo(dialog, QPoint(0, 0)).y() >= (
        dialog.error.mapTo(dialog, QPoint(0, 0)).y() + dialog.error.height()
    )
    dialog.reject()


def test_placeholders_fit_and_a_long_folder_is_elided_in_the_middle(
    qtbot: QtBot, desktop: DesktopApp, tmp_path: Path
) -> None:
    dialog = open_settings(desktop)
    qtbot.waitExposed(dialog)
    for field in (dialog.api_key, dialog.origins):
        placeholder = field.placeholderText()
        assert field.width() > field.fontMetrics().horizontalAdvance(placeholder) + 8, placeholder
    assert not any(cli in dialog.api_key.placeholderText() for cli in ("--", "SIDELIGHT_"))
    # Port 0 (any free port, as these tests run) is shown as such, not clamped to port 1.
    assert desktop.controller.settings.port == 0
    assert dialog.port.value() == 0 and dialog.port.text() == "Any free port"

    deep = tmp_path.joinpath(*(f"a-rather-long-folder-name-{i}" for i in range(8)), "models")
    dialog.models_dir.set_path(deep)
    label = dialog.models_dir
    assert "…" in label.text()
    assert label.text().startswith(str(deep)[:3]) and label.text().endswith("models")
    assert label.toolTip() == str(deep)
    assert label.fontMetrics().horizontalAdvance(label.text()) <= label.contentsRect().width()
    assert dialog.screen().availableGeometry().contains(dialog.frameGeometry())
    dialog.reject()


def test_start_at_login_toggles_the_xdg_autostart_file(desktop: DesktopApp) -> None:
    autostart = desktop.autostart
    assert isinstance(autostart, XdgAutostart)
    assert not autostart.path.exists()

    dialog = open_settings(desktop)
    dialog.start_at_login.setChecked(True)
    dialog.save()
    text = autostart.path.read_text()
    assert "[Desktop Entry]" in text and "Type=Application" in text
    exec_line = next(line for line in text.splitlines() if line.startswith("Exec="))
    assert exec_line == f"Exec={sys.executable} -m engine.cli"
    assert autostart.is_enabled()

    dialog = open_settings(desktop)
    assert dialog.start_at_login.isChecked()
    dialog.start_at_login.setChecked(False)
    dialog.save()
    assert not autostart.path.exists()


def test_xdg_exec_line_quotes_spaces(tmp_path: Path) -> None:
    autostart = XdgAutostart(tmp_path)
    autostart.enable(["/opt/My Apps/sidelight", "--flag", 'say "hi" $HOME'])
    line = next(x for x in autostart.path.read_text().splitlines() if x.startswith("Exec="))
    assert line == 'Exec="/opt/My Apps/sidelight" --flag "say \\"hi\\" \\$HOME"'


class FileRunKey:
    """Stands in for HKCU\\...\\Run: the real registry cannot exist on this Linux machine,
    so the Windows path is exercised against a JSON file in a temporary folder."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict[str, str]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def get(self, name: str) -> str | None:
        return self._read().get(name)

    def set(self, name: str, value: str) -> None:
        self.path.write_text(json.dumps({**self._read(), name: value}))

    def delete(self, name: str) -> None:
        values = self._read()
        values.pop(name, None)
        self.path.write_text(json.dumps(values))


def test_windows_run_key_is_written_and_removed(tmp_path: Path) -> None:
    writer = FileRunKey(tmp_path / "run.json")
    writer.set("OtherApp", "other.exe")
    autostart = WindowsRunKey(writer)
    assert not autostart.is_enabled()

    set_enabled(autostart, True)
    command = writer.get(RUN_VALUE)
    assert command == subprocess.list2cmdline(launch_command())
    assert autostart.is_enabled()
    autostart.enable([r"C:\Program Files\Sidelight\Sidelight.exe"])
    assert writer.get(RUN_VALUE) == r'"C:\Program Files\Sidelight\Sidelight.exe"'

    set_enabled(autostart, False)
    assert not autostart.is_enabled()
    assert writer.get("OtherApp") == "other.exe"  # nothing else touched


def test_config_survives_a_restart(desktop: DesktopApp) -> None:
    dialog = open_settings(desktop)
    dialog.api_key.setText("k" * 24)
    dialog.save()
    config_file = desktop.controller.settings.paths.config_file
    assert oct(config_file.stat().st_mode & 0o777) == "0o600"
    assert load_settings().api_key == "k" * 24


def test_save_config_merges_removes_and_refuses_unknown_keys(sidelight_home: Path) -> None:
    paths = load_settings().paths
    save_config(paths, {"port": 12345, "api_key": "secret-key", "allowed_origins": ("a", "b")})
    save_config(paths, {"api_key": None, "device": "GPU"})
    assert json.loads(paths.config_file.read_text()) == {
        "port": 12345,
        "allowed_origins": ["a", "b"],
        "device": "GPU",
    }
    with pytest.raises(SettingsError, match="unknown config keys: prot"):
        save_config(paths, {"prot": 1})
    settings = load_settings()
    assert (settings.port, settings.device, settings.api_key) == (12345, "GPU", None)


def test_a_setting_the_environment_decides_is_greyed_out_and_not_saved(
    qtbot: QtBot, desktop: DesktopApp
) -> None:
    """SIDELIGHT_PORT (set by the fixture) wins over config.json: the dialog says so and
    Save leaves the port out, instead of saving a value that would never apply."""
    dialog = open_settings(desktop)
    assert not dialog.port.isEnabled()
    assert dialog.host.isEnabled()
    assert not dialog.env_note.isHidden()
    assert "SIDELIGHT_PORT" in dialog.env_note.text()
    assert "SIDELIGHT_PORT" in dialog.port.toolTip()
    dialog.theme.setCurrentIndex(dialog.theme.findData("dark"))
    dialog.save()
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=15000)
    config = json.loads(desktop.controller.settings.paths.config_file.read_text())
    assert config["theme"] == "dark"
    assert "port" not in config


def test_window_titles_name_sidelight_once(desktop: DesktopApp) -> None:
    """Qt appends " — Sidelight" (the application display name) to every title that does
    not already end with it; a title that starts with "Sidelight" then names it twice."""
    desktop.show_settings()
    desktop.show_models()
    desktop.show_requests()
    desktop.show_chat()
    shown = []
    for window in QApplication.topLevelWidgets():
        title = window.windowTitle()
        if window.isVisible() and title:
            shown.append(title if title.endswith("Sidelight") else f"{title} — Sidelight")
    assert len(shown) >= 4, shown
    for title in shown:
        assert title.count("Sidelight") == 1, title


def test_warnings_coming_and_going_move_nothing(qtbot: QtBot, desktop: DesktopApp) -> None:
    """Issue 28, defect 12: the dialog resized and moved its buttons as the address
    warning and a save's error came and went (on this small screen it cannot grow: the
    rows below the warning moved instead). Their room is kept now."""
    dialog = open_settings(desktop)
    qtbot.waitExposed(dialog)
    qtbot.wait(10)  # the layout settles
    size = dialog.size()
    place = dialog.buttons.mapTo(dialog, QPoint(0, 0))

    def rows() -> list[QPoint]:
        return [w.mapTo(dialog, QPoint(0, 0)) for w in (dialog.api_key, dialog.origins)]

    where = rows()
    assert dialog.warning.text() == LOOPBACK_HINT and dialog.error.isHidden()

    dialog.host.setText("0.0.0.0")  # the two-line warning appears
    assert dialog.warning.isVisible() and "other computers" in dialog.warning.text()
    qtbot.wait(10)  # the layout settles
    assert rows() == where
    assert dialog.size() == size and dialog.buttons.mapTo(dialog, QPoint(0, 0)) == place
    dialog.save()  # refused (no API key): the error under the rows
    assert not dialog.error.isHidden() and "API key" in dialog.error.text()
    qtbot.wait(10)
    assert rows() == where
    assert dialog.size() == size and dialog.buttons.mapTo(dialog, QPoint(0, 0)) == place
    dialog.host.setText("127.0.0.1")  # both go
    assert dialog.warning.text() == LOOPBACK_HINT and dialog.error.isHidden()
    assert dialog.size() == size and dialog.buttons.mapTo(dialog, QPoint(0, 0)) == place
    dialog.reject()
