"""The tray icon and its menu. The menu is rebuilt each time it opens (``aboutToShow``).

Threading: GUI thread only.
"""

from __future__ import annotations

import logging
import time

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction, QActionGroup, QGuiApplication
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from desktop.controller import Controller
from desktop.icons import icon, state_icon_name
from engine.supervisor.states import ERROR, IDLE, LOADING, READY, RESTARTING, STARTING, STOPPED

logger = logging.getLogger(__name__)

_MAX_STATUS = 70


def status_text(controller: Controller) -> str:
    """One line saying what the engine is doing, as the menu's first entry shows it."""
    status = controller.status
    model = status.model.id if status.model else None
    others = [m for m in controller.loading_models if m != model]
    if others:  # a request loads another model (the default one keeps serving)
        if status.state not in (READY, LOADING):
            return _shorten(f"Loading {', '.join(others)}…")
        return _shorten(f"{status_word(status.state)}: {model} · loading {', '.join(others)}…")
    if status.state == READY:
        busy = ", generating" if controller.generating else ""
        return f"Ready: {model} on {status.device}{busy}"
    if status.state == ERROR:
        return _shorten(f"Error: {status.message or 'the engine failed'}")
    if status.state == IDLE and status.unloaded and status.message:
        return _shorten(status.message)  # "<model> was unloaded (idle)": loads on next use
    texts = {
        LOADING: f"Loading {model} on {status.device}…",
        STARTING: "Starting the engine…",
        STOPPED: "Starting the engine…",
        RESTARTING: "The engine is restarting…",
        IDLE: "No model loaded",
    }
    return texts.get(status.state, status.state)


def status_word(state: str) -> str:
    return "Ready" if state == READY else "Loading"


def unload_text(controller: Controller) -> str | None:
    """The latest "<model> was unloaded: <why>" while that model is still out of memory
    (the tooltip's last line), else None."""
    if not controller.unloads:
        return None
    event = controller.unloads[-1]
    loaded = {m.lower() for m in controller.loading_models}
    loaded |= {m.id.lower() for m in controller.loaded_models()}  # any model, not only the default
    status = controller.status
    if status.model is not None and status.state == READY:
        loaded.add(status.model.id.lower())
    if event.model_id.lower() in loaded:
        return None
    return _shorten(event.text())


def _shorten(text: str) -> str:
    return text if len(text) <= _MAX_STATUS else text[: _MAX_STATUS - 1] + "…"


class TrayMenu(QMenu):
    """Server state and URL, Models, Device, the windows (chat, requests, settings), Quit."""

    open_chat = Signal()
    open_models = Signal()
    open_requests = Signal()
    open_settings = Signal()
    quit_requested = Signal()

    def __init__(self, controller: Controller) -> None:
        super().__init__()
        self.controller = controller
        # Submenus live as long as the menu; only their entries are rebuilt.
        self.models_menu = QMenu("Models", self)
        self.devices_menu = QMenu("Device", self)
        # Beside Models, not inside it: a submenu of a submenu opened over its parent (the
        # tray sits at a screen edge, so Models opens leftwards and In memory had nowhere
        # to go but back over it).
        self.loaded_menu = QMenu("In memory", self)
        self.aboutToShow.connect(self.rebuild)
        self.rebuild()

    def rebuild(self) -> None:
        self.controller.refresh_models()
        self.clear()
        state = self.addAction(status_text(self.controller))
        state.setEnabled(False)
        if self.controller.chore:  # moving models, tuning for the CPU
            self.addAction(_shorten(self.controller.chore)).setEnabled(False)
        url = self.controller.api_base_url
        if url:
            copy = self.addAction(f"Copy API URL  {url}")
            copy.setToolTip("Copies the OpenAI base URL for IDE plugins")
            copy.triggered.connect(lambda: self._copy(url))
        else:
            error = self.controller.server_error or "starting…"
            self.addAction(_shorten(f"Server: {error}")).setEnabled(False)
        self.addSeparator()
        self._fill_models()
        self.addMenu(self.models_menu)
        if self._fill_loaded():
            self.addMenu(self.loaded_menu)
        self._fill_devices()
        self.addMenu(self.devices_menu)
        self.addAction("Download models…").triggered.connect(self.open_models)
        self.addSeparator()
        self.addAction("Open chat").triggered.connect(self.open_chat)
        requests = self.addAction("Requests…")
        requests.setToolTip("What clients sent, how long it took, and why it failed")
        requests.triggered.connect(self.open_requests)
        self.addAction("Settings…").triggered.connect(self.open_settings)
        self.addSeparator()
        self.addAction("Quit Sidelight").triggered.connect(self.quit_requested)

    def _fill_models(self) -> None:
        menu, controller = self.models_menu, self.controller
        menu.clear()
        group = QActionGroup(menu)
        active = controller.active_model_id
        checked = controller.chat_default_id  # a remote model picked here, else the default
        loading = controller.status.state == LOADING
        for choice in controller.models():
            plain = choice.is_demo or choice.remote is not None or choice.label == choice.id
            label = choice.label if plain else f"{choice.label} ({choice.id})"
            if choice.id == active and loading:
                label += " — loading…"
            action = QAction(label, menu, checkable=True)
            action.setData(choice.id)
            action.setChecked(choice.id == checked)
            action.triggered.connect(lambda _=False, m=choice.id: controller.select_model(m))
            group.addAction(action)
            menu.addAction(action)
        menu.addSeparator()
        menu.addAction("Download models…").triggered.connect(self.open_models)

    def _fill_loaded(self) -> bool:
        """The "In memory" submenu: the models held in memory, each with its measured memory
        and device; choosing one unloads it (its engine worker ends). False: nothing to
        list (the menu is left out)."""
        loaded_menu = self.loaded_menu
        loaded_menu.clear()
        loaded = self.controller.loaded_models()
        unloads = self.controller.unloads
        if not loaded and not unloads:
            return False
        loaded_menu.setToolTipsVisible(True)
        for model in loaded:
            memory = f"{model.memory_mb} MB" if model.memory_mb is not None else "? MB"
            if model.state == LOADING:
                action = loaded_menu.addAction(f"Loading {model.id}…  ({model.device or '?'})")
                action.setEnabled(False)
            else:
                where = f"{memory}, {model.device or '?'}"
                action = loaded_menu.addAction(f"Unload {model.id}  ({where})")
                action.setEnabled(model.active_requests == 0)
            action.setData(f"unload:{model.id}")
            action.setToolTip("Ends its engine worker and returns the memory")
            action.triggered.connect(lambda _=False, m=model.id: self.controller.unload_model(m))
        if unloads:  # why models went away lately, newest first
            loaded_menu.addSeparator()
            loaded_menu.addAction("Recently unloaded").setEnabled(False)
            for event in reversed(unloads):
                when = time.strftime("%H:%M", time.localtime(event.at))
                entry = loaded_menu.addAction(_shorten(f"{when}  {event.text()}"))
                entry.setData(f"gone:{event.model_id}")
                entry.setToolTip(event.message)
                entry.setEnabled(False)
        return True

    def _fill_devices(self) -> None:
        menu, controller = self.devices_menu, self.controller
        menu.clear()
        if controller.devices is None:
            menu.addAction("Detecting devices…").setEnabled(False)
            return
        group = QActionGroup(menu)
        model = controller.choice(controller.active_model_id)
        for device in controller.devices:
            action = QAction(device.label, menu, checkable=True)
            action.setData(device.name)
            action.setChecked(device.name == controller.active_device)
            if model is not None and not model.runs_on(device):
                action.setEnabled(False)
                action.setToolTip(f"{model.id} cannot run on {device.kind.upper()}")
            action.triggered.connect(lambda _=False, d=device.name: controller.select_device(d))
            group.addAction(action)
            menu.addAction(action)
        menu.setToolTipsVisible(True)

    def _copy(self, url: str) -> None:
        QGuiApplication.clipboard().setText(url)
        self.controller.notify.emit("Copied", f"{url} is on the clipboard", False)

    def find_action(self, menu: QMenu, data: str) -> QAction:
        """The entry of ``menu`` whose data is ``data`` (for tests and keyboard access)."""
        for action in menu.actions():
            if action.data() == data:
                return action
        raise LookupError(data)


class TrayIcon(QSystemTrayIcon):
    """The icon: its picture follows the engine state; a click opens the chat."""

    def __init__(self, controller: Controller, parent: QObject | None = None) -> None:
        super().__init__(icon("idle"), parent)
        self.controller = controller
        self.menu = TrayMenu(controller)
        self.setContextMenu(self.menu)
        self.icon_name = "idle"
        self.activated.connect(self._on_activated)
        controller.status_changed.connect(self.refresh)
        controller.activity_changed.connect(self.refresh)
        controller.server_changed.connect(self.refresh)
        controller.chore_changed.connect(self.refresh)
        controller.loading_changed.connect(self.refresh)
        controller.model_unloaded.connect(self.refresh)
        controller.notify.connect(self.show_notification)
        self.refresh()

    def refresh(self) -> None:
        controller = self.controller
        name = state_icon_name(
            controller.status, controller.generating, controller.server_error is not None
        )
        if name != self.icon_name:
            self.icon_name = name
            self.setIcon(icon(name))
        url = controller.api_base_url or controller.server_error or "starting"
        chore = f"\n{controller.chore}" if controller.chore else ""
        gone = unload_text(controller)
        gone_line = f"\n{gone}" if gone else ""
        self.setToolTip(f"Sidelight — {status_text(controller)}{chore}{gone_line}\n{url}")

    def show_notification(self, title: str, message: str, is_error: bool) -> None:
        if not (self.isVisible() and self.supportsMessages()):
            return
        kind = (
            QSystemTrayIcon.MessageIcon.Warning
            if is_error
            else QSystemTrayIcon.MessageIcon.Information
        )
        self.showMessage(title, message, kind, 8000)

    def _on_activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        if reason == QSystemTrayIcon.ActivationReason.Trigger:
            self.menu.open_chat.emit()
