"""``SettingsDialog``: server address and key, allowed origins, model folder, default device,
start at login, and the remote servers (``RemotesPanel``, saved as they are edited). Saved to ``config.json`` through ``engine.settings.save_config`` and applied
at once.

When the server's address moves, the new server must listen before anything is kept: the old
server serves until then, and if the new one cannot start (a port in use...) the dialog stays
open with the reason, and the old server and the old ``config.json`` stay.

Threading: GUI thread only; saving writes two small files, the server starts off the GUI
thread.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication, QResizeEvent
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
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from desktop.autostart import Autostart, set_enabled
from desktop.controller import Controller, server_error_text
from desktop.views.remotes_panel import RemotesPanel
from desktop.views.screen import available_area, line_edit_width
from engine.remotes.registry import remotes_path
from engine.settings import (
    DEFAULT_ALLOWED_ORIGINS,
    Settings,
    SettingsError,
    env_overrides,
    is_loopback_host,
    load_settings,
    save_config,
)

logger = logging.getLogger(__name__)

KEY_PLACEHOLDER = "None: any key works on this computer"
ORIGINS_PLACEHOLDER = "One pattern per line, e.g. https://chat\\.example\\.org"
PATH_MIN_CHARS = 28
THEME_CHOICES = (
    ("Follow the system (light or dark)", "system"),
    ("Light", "light"),
    ("Dark", "dark"),
)


# Lines of room kept for the address warning and for a save's error, shown or not, so the
# dialog neither resizes nor moves its buttons as they come and go (issue 28, defect 12).
LOOPBACK_HINT = (
    "Only this computer can reach the server. 0.0.0.0 serves your network (it then needs an "
    "API key)."
)
WARNING_LINES = 3  # two at most on a wide dialog, three at the narrowest
ERROR_LINES = 3


def _reserve(label: QLabel, lines: int) -> None:
    """Keep ``lines`` lines of room for ``label`` whether it shows or not."""
    policy = label.sizePolicy()
    policy.setRetainSizeWhenHidden(True)
    label.setSizePolicy(policy)
    label.setMinimumHeight(lines * label.fontMetrics().lineSpacing())
    label.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)


class PathLabel(QLabel):
    """A folder path that fits its width: elided in the middle, whole in the tooltip."""

    def __init__(self, path: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setMinimumWidth(self.fontMetrics().averageCharWidth() * PATH_MIN_CHARS)
        self.path = path
        self.set_path(path)

    def set_path(self, path: Path) -> None:
        self.path = path
        self.setToolTip(str(path))
        self._elide()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        width = self.contentsRect().width()
        self.setText(
            self.fontMetrics().elidedText(str(self.path), Qt.TextElideMode.ElideMiddle, width)
        )


class SettingsDialog(QDialog):
    """Edits what ``engine.settings`` reads from the config file. ``theme_chosen(choice)``
    is emitted once a save succeeded, so the app can recolour its windows at once."""

    theme_chosen = Signal(str)

    def __init__(
        self, controller: Controller, autostart: Autostart | None, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.controller = controller
        self.autostart = autostart
        self._saved_config: bytes | None = None  # config.json as it was, while a save is tried
        self.setWindowTitle("Settings")  # Qt adds " — Sidelight"
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self._add_server_rows(form)
        self._add_app_rows(form)
        self.overridden = self._mark_env_overrides()
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setProperty("role", "error")  # coloured by desktop.theme
        _reserve(self.error, ERROR_LINES)
        self.error.hide()
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel
        )
        self.buttons.accepted.connect(self.save)
        self.buttons.rejected.connect(self.reject)
        # Remote servers are saved as they are edited (remotes.json), not by Save.
        self.remotes = RemotesPanel(remotes_path(controller.settings.paths.config_dir))
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.remotes)
        layout.addWidget(self.env_note)
        layout.addWidget(self.error)
        layout.addWidget(self.buttons)
        self._sync_warning()
        for changed in (
            self.host.textChanged,
            self.port.valueChanged,
            self.api_key.textChanged,
            self.origins.textChanged,
            self.device.currentIndexChanged,
            self.theme.currentIndexChanged,
            self.start_at_login.toggled,
        ):
            changed.connect(self._clear_error)
        self.grow_to_fit()

    def _add_server_rows(self, form: QFormLayout) -> None:
        settings = self.controller.settings
        self.host = QLineEdit(settings.host)
        self.host.setToolTip("127.0.0.1 serves this computer only; 0.0.0.0 serves your network")
        self.host.textChanged.connect(self._sync_warning)
        self.port = QSpinBox()
        self.port.setRange(0, 65535)
        self.port.setSpecialValueText("Any free port")  # 0: the system picks one each start
        self.port.setValue(settings.port)
        form.addRow("Bind address", self.host)
        form.addRow("Port", self.port)
        form.addRow("API key", self._key_row(settings))
        self.warning = QLabel()
        self.warning.setWordWrap(True)
        self.warning.setProperty("role", "warning")  # coloured by desktop.theme
        _reserve(self.warning, WARNING_LINES)
        form.addRow("", self.warning)
        extra = [o for o in settings.allowed_origins if o not in DEFAULT_ALLOWED_ORIGINS]
        self.origins = QPlainTextEdit("\n".join(extra))
        self.origins.setPlaceholderText(ORIGINS_PLACEHOLDER)
        self.origins.setToolTip(
            "Web pages, besides this computer's own and VS Code's, that may call the server "
            "from a browser. Each line is a pattern (a regular expression)."
        )
        self.origins.setMinimumWidth(line_edit_width(self.origins, ORIGINS_PLACEHOLDER))
        self.origins.setFixedHeight(4 * self.origins.fontMetrics().lineSpacing())
        form.addRow("Allowed origins", self.origins)

    def _key_row(self, settings: Settings) -> QHBoxLayout:
        self.api_key = QLineEdit(settings.api_key or "")
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText(KEY_PLACEHOLDER)
        self.api_key.setMinimumWidth(line_edit_width(self.api_key, KEY_PLACEHOLDER))
        self.api_key.textChanged.connect(self._sync_warning)
        self.show_key = QPushButton("Show")
        self.show_key.setCheckable(True)
        self.show_key.setToolTip("Show or hide the key")
        self.show_key.toggled.connect(self._on_show_key)
        self.copy_key = QPushButton("Copy")
        self.copy_key.setToolTip("Copy the key, to paste it into an IDE plugin")
        self.copy_key.clicked.connect(self._copy_key)
        self.api_key.textChanged.connect(self._sync_key_buttons)
        generate = QPushButton("Generate")
        generate.setToolTip("Make a new random key (shown, so it can be copied)")
        generate.clicked.connect(self._generate_key)
        self.generate_key = generate
        row = QHBoxLayout()
        row.addWidget(self.api_key, 1)
        for button in (self.show_key, self.copy_key, generate):
            row.addWidget(button)
        self._sync_key_buttons()
        return row

    def _sync_key_buttons(self) -> None:
        """Show and Copy only with a key to show or copy (else a click would do nothing)."""
        has_key = bool(self.api_key.text().strip())
        self.copy_key.setText("Copy")
        self.copy_key.setEnabled(has_key)
        self.show_key.setEnabled(has_key)

    def _add_app_rows(self, form: QFormLayout) -> None:
        settings, controller = self.controller.settings, self.controller
        self.models_dir = PathLabel(settings.paths.models_dir)
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
        self.theme = QComboBox()
        for label, choice in THEME_CHOICES:
            self.theme.addItem(label, choice)
        self.theme.setCurrentIndex(max(0, self.theme.findData(settings.theme)))
        form.addRow("Appearance", self.theme)
        form.addRow("", self.start_at_login)

    def _mark_env_overrides(self) -> dict[str, str]:
        """Grey out the rows an environment variable decides (it wins over ``config.json``),
        say which, and leave those keys out of what Save writes."""
        rows: dict[str, QWidget] = {
            "host": self.host,
            "port": self.port,
            "api_key": self.api_key,
            "allowed_origins": self.origins,
            "device": self.device,
            "theme": self.theme,
        }
        overridden = env_overrides(rows)
        for key, variable in overridden.items():
            rows[key].setEnabled(False)
            rows[key].setToolTip(f"Set by {variable} in the environment, which wins over this")
        self.env_note = QLabel(
            "Set in the environment, which wins over these settings: "
            + ", ".join(overridden.values())
            + ". Unset it and restart Sidelight to change this here."
        )
        self.env_note.setWordWrap(True)
        self.env_note.setProperty("role", "warning")  # coloured by desktop.theme
        self.env_note.setVisible(bool(overridden))
        return overridden

    # ---- what the rows do --------------------------------------------------------------

    def _sync_warning(self) -> None:
        host = self.host.text().strip()
        if host and not is_loopback_host(host):
            need = "" if self.api_key.text().strip() else " Set an API key first (required)."
            self.warning.setText(f"{host} makes the server reachable from other computers.{need}")
            role = "warning"
        else:
            # Never hidden: a form layout drops a hidden row's room whatever the size policy
            # says, and the rows below would move up and down. The room says what the
            # address does instead.
            self.warning.setText(LOOPBACK_HINT)
            role = ""
        if self.warning.property("role") != role:
            self.warning.setProperty("role", role)  # coloured by desktop.theme when "warning"
            self.warning.style().unpolish(self.warning)
            self.warning.style().polish(self.warning)
        self.grow_to_fit()

    def _on_show_key(self, shown: bool) -> None:
        mode = QLineEdit.EchoMode.Normal if shown else QLineEdit.EchoMode.Password
        self.api_key.setEchoMode(mode)
        self.show_key.setText("Hide" if shown else "Show")

    def _generate_key(self) -> None:
        self.api_key.setText(secrets.token_urlsafe(24))
        self.show_key.setChecked(True)

    def _copy_key(self) -> None:
        key = self.api_key.text().strip()
        if key:
            QGuiApplication.clipboard().setText(key)
            self.copy_key.setText("Copied")

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Model folder", str(self.models_dir.path))
        if folder:
            self.models_dir.set_path(Path(folder))
            self._clear_error()

    def _clear_error(self) -> None:
        """An error speaks about the input it was given: gone once the input changes."""
        if not self.error.isHidden():
            self._show_error("")

    def _show_error(self, text: str) -> None:
        self.error.setText(text)
        self.error.setVisible(bool(text))
        self.grow_to_fit()

    def grow_to_fit(self) -> None:
        """Take the height the rows need (wrapped lines included, no more than the screen
        has). The warning's and the error's room is kept while they are hidden, so once
        the dialog shows it only ever grows, for a message longer than that room: never
        narrower, never shorter, its buttons where they were."""
        layout = self.layout()
        if layout is None:
            return
        layout.activate()
        area = available_area(self)
        shown = self.isVisible()  # a new window's size means nothing
        width = self.width() if shown else self.sizeHint().width()
        width = min(max(width, layout.totalMinimumSize().width()), area.width())
        height = layout.totalHeightForWidth(width) if layout.hasHeightForWidth() else -1
        height = max(height, layout.totalMinimumSize().height(), self.sizeHint().height())
        if shown:
            height = max(height, self.height())
        self.resize(width, min(height, area.height()))

    # ---- saving ------------------------------------------------------------------------

    def save(self) -> None:
        """Validate, write ``config.json``, start the server if its address moved; close
        once it listens (or stay open with the reason and the old config)."""
        settings = self.controller.settings
        host = self.host.text().strip() or settings.host
        api_key = self.api_key.text().strip() or None
        if not is_loopback_host(host) and not api_key:
            self._show_error(
                f"Other computers can reach the server at {host}, so it needs an API key: "
                "press Generate, then give the key to the programs that connect."
            )
            return
        try:
            replace(settings, host=host, port=self.port.value(), api_key=api_key).validate()
        except SettingsError as exc:
            self._show_error(str(exc))
            return
        origins = [line.strip() for line in self.origins.toPlainText().splitlines() if line.strip()]
        values: dict[str, object] = {
            "host": host,
            "port": self.port.value(),
            "api_key": api_key,
            "allowed_origins": origins or None,
            "device": self.device.currentData() or settings.device,
            "theme": self.theme.currentData() or settings.theme,
        }
        for key in self.overridden:
            values.pop(key, None)  # the environment decides these; config.json keeps its own
        if self.models_dir.path != settings.paths.models_dir:
            values["models_dir"] = str(self.models_dir.path)
        config_file = settings.paths.config_file
        try:
            self._saved_config = config_file.read_bytes() if config_file.exists() else None
            save_config(settings.paths, values)
            new_settings = load_settings()
        except (SettingsError, OSError) as exc:
            self._restore_config()
            self._show_error(f"Could not save the settings: {exc}")
            return
        self._set_busy(True)
        self.controller.apply_settings(
            new_settings, lambda exc: self._on_applied(new_settings, exc)
        )

    def _on_applied(self, new_settings: Settings, exc: Exception | None) -> None:
        self._set_busy(False)
        if exc is not None:
            self._restore_config()
            where = self.controller.api_base_url
            still = f" Sidelight still serves at {where}." if where else ""
            self._show_error(f"{server_error_text(exc, new_settings, where='')}{still}")
            return
        self._saved_config = None
        try:
            wanted = self.start_at_login.isChecked()
            if self.autostart is not None and wanted != self.autostart.is_enabled():
                set_enabled(self.autostart, wanted)
        except OSError as error:
            self._show_error(f"Saved, but start at login could not be changed: {error}")
            return
        logger.info("settings saved to %s", new_settings.paths.config_file)
        self.theme_chosen.emit(new_settings.theme)
        self.accept()

    def _restore_config(self) -> None:
        """Put ``config.json`` back as it was before this save."""
        config_file = self.controller.settings.paths.config_file
        try:
            if self._saved_config is None:
                config_file.unlink(missing_ok=True)
            else:
                tmp = config_file.with_name(f".{config_file.name}.restore")
                tmp.write_bytes(self._saved_config)
                tmp.chmod(0o600)
                tmp.replace(config_file)
        except OSError:
            logger.warning("could not restore %s", config_file, exc_info=True)
        self._saved_config = None

    def _set_busy(self, busy: bool) -> None:
        save = self.buttons.button(QDialogButtonBox.StandardButton.Save)
        save.setEnabled(not busy)
        save.setText("Starting the server…" if busy else "Save")
