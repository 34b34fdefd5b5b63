"""``SettingsDialog``: server address and key, allowed origins, model folder, default device,
start at login. Saved to ``config.json`` through ``engine.settings.save_config`` and applied
at once (the server restarts when its options change).

Threading: GUI thread only; saving writes two small files.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import replace
from pathlib import Path

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from desktop.autostart import Autostart, set_enabled
from desktop.controller import Controller
from engine.settings import (
    DEFAULT_ALLOWED_ORIGINS,
    SettingsError,
    is_loopback_host,
    load_settings,
    save_config,
)

logger = logging.getLogger(__name__)


class SettingsDialog(QDialog):
    """Edits what ``engine.settings`` reads from the config file."""

    def __init__(
        self, controller: Controller, autostart: Autostart | None, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.controller = controller
        self.autostart = autostart
        self.setWindowTitle("Sidelight settings")
        form = QFormLayout()
        self._add_server_rows(form)
        self._add_app_rows(form)
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #c93434;")
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.save)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.error)
        layout.addWidget(buttons)
        self._sync_warning()

    def _add_server_rows(self, form: QFormLayout) -> None:
        settings = self.controller.settings
        self.host = QLineEdit(settings.host)
        self.host.setToolTip("127.0.0.1 serves this computer only; 0.0.0.0 serves your network")
        self.host.textChanged.connect(self._sync_warning)
        self.port = QSpinBox()
        self.port.setRange(1, 65535)
        self.port.setValue(settings.port)
        self.api_key = QLineEdit(settings.api_key or "")
        self.api_key.setEchoMode(QLineEdit.EchoMode.PasswordEchoOnEdit)
        self.api_key.setPlaceholderText("none (any key works on this computer)")
        self.api_key.textChanged.connect(self._sync_warning)
        generate = QPushButton("Generate")
        generate.clicked.connect(lambda: self.api_key.setText(secrets.token_urlsafe(24)))
        key_row = QHBoxLayout()
        key_row.addWidget(self.api_key, 1)
        key_row.addWidget(generate)
        self.warning = QLabel()
        self.warning.setWordWrap(True)
        self.warning.setStyleSheet("color: #b35c00;")
        extra = [o for o in settings.allowed_origins if o not in DEFAULT_ALLOWED_ORIGINS]
        self.origins = QPlainTextEdit("\n".join(extra))
        self.origins.setPlaceholderText("extra browser origins, one regular expression a line")
        self.origins.setFixedHeight(64)
        form.addRow("Bind address", self.host)
        form.addRow("Port", self.port)
        form.addRow("API key", key_row)
        form.addRow("", self.warning)
        form.addRow("Allowed origins", self.origins)

    def _add_app_rows(self, form: QFormLayout) -> None:
        settings, controller = self.controller.settings, self.controller
        self.models_dir = QLineEdit(str(settings.paths.models_dir))
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        folder_row = QHBoxLayout()
        folder_row.addWidget(self.models_dir, 1)
        folder_row.addWidget(browse)
        self.device = QComboBox()
        for device in controller.devices or []:
            self.device.addItem(device.label, device.name)
        if self.device.findData(settings.device) < 0:
            self.device.addItem(settings.device, settings.device)
        self.device.setCurrentIndex(self.device.findData(settings.device))
        self.start_at_login = QCheckBox("Start Sidelight when I log in")
        if self.autostart is None:
            self.start_at_login.setEnabled(False)
            self.start_at_login.setToolTip("Not supported on this system yet")
        else:
            self.start_at_login.setChecked(self.autostart.is_enabled())
        form.addRow("Model folder", folder_row)
        form.addRow("Default device", self.device)
        form.addRow("", self.start_at_login)

    def _sync_warning(self) -> None:
        host = self.host.text().strip()
        if host and not is_loopback_host(host):
            need = "" if self.api_key.text().strip() else " Set an API key first (required)."
            self.warning.setText(f"{host} makes the server reachable from other computers.{need}")
            self.warning.show()
        else:
            self.warning.hide()

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Model folder", self.models_dir.text())
        if folder:
            self.models_dir.setText(folder)

    def save(self) -> None:
        """Validate, write ``config.json`` and the autostart entry, apply, close."""
        settings = self.controller.settings
        host = self.host.text().strip() or settings.host
        api_key = self.api_key.text().strip() or None
        origins = [line.strip() for line in self.origins.toPlainText().splitlines() if line.strip()]
        try:
            replace(settings, host=host, port=self.port.value(), api_key=api_key).validate()
        except SettingsError as exc:
            self.error.setText(str(exc))
            return
        values: dict[str, object] = {
            "host": host,
            "port": self.port.value(),
            "api_key": api_key,
            "allowed_origins": origins or None,
            "device": self.device.currentData() or settings.device,
        }
        folder = Path(self.models_dir.text().strip()).expanduser()
        if self.models_dir.text().strip() and folder != settings.paths.models_dir:
            values["models_dir"] = str(folder)
        try:
            save_config(settings.paths, values)
            wanted = self.start_at_login.isChecked()
            if self.autostart is not None and wanted != self.autostart.is_enabled():
                set_enabled(self.autostart, wanted)
            new_settings = load_settings()
        except (SettingsError, OSError) as exc:
            self.error.setText(f"Could not save: {exc}")
            return
        self.controller.apply_settings(new_settings)
        logger.info("settings saved to %s", settings.paths.config_file)
        self.accept()
