"""Start the tray app: ``run(settings)`` is what ``sidelight`` (no subcommand) calls.

:class:`DesktopApp` wires the controller, the tray and the windows together; windows are
created when first opened. The app quits only from the tray menu.

Threading: GUI thread only.
"""

from __future__ import annotations

import logging
import signal
import sys
from types import FrameType

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QApplication, QMessageBox, QSystemTrayIcon, QWidget

from desktop.autostart import Autostart, for_platform
from desktop.chat import ChatOptions
from desktop.controller import Controller
from desktop.gui_gc import collect_on_gui_thread
from desktop.history import ChatHistory
from desktop.icons import icon
from desktop.instance import SingleInstance, instance_name
from desktop.jobs import Job
from desktop.taskman import TaskManager
from desktop.theme import ThemeManager, theme_choice
from desktop.tray import TrayIcon
from desktop.views.chat_window import ChatWindow
from desktop.views.model_manager import ModelManager
from desktop.views.requests_window import RequestsWindow
from desktop.views.settings_dialog import SettingsDialog
from desktop.views.store_move import MoveDialog
from desktop.views.welcome import WelcomeDialog
from engine.devices import DeviceInfo
from engine.logs import setup_logging
from engine.runtime import ServedEngine
from engine.settings import Settings, SettingsError
from engine.store.catalog import Catalog, CatalogEntry, MachineInfo

logger = logging.getLogger(__name__)

NO_TRAY_NOTICE = (
    "This desktop shows no tray icons, so Sidelight runs in this window; closing it quits "
    "Sidelight."
)


class DesktopApp(QObject):
    """The running tray app: controller, tray icon, chat window and dialogs."""

    def __init__(
        self,
        settings: Settings,
        *,
        engine: ServedEngine | None = None,
        devices: list[DeviceInfo] | None = None,
        autostart: Autostart | None = None,
        chat_options: ChatOptions | None = None,
        hub_endpoint: str | None = None,
        parent: QObject | None = None,
    ) -> None:
        """Args (beyond ``settings``) let tests share one engine and skip slow discovery."""
        super().__init__(parent)
        self.tasks = TaskManager(self)
        self.theme = ThemeManager(settings.theme, self)
        self.theme.apply()  # before any window exists: they open in the right colours
        self.controller = Controller(
            settings, self.tasks, engine=engine, devices=devices, parent=self
        )
        self.autostart = autostart if autostart is not None else for_platform()
        self.chat_options = chat_options
        self.hub_endpoint = hub_endpoint
        self.history = ChatHistory(settings.paths.config_dir / "chats")
        self.tray = TrayIcon(self.controller, self)
        self._chat: ChatWindow | None = None
        self._models: ModelManager | None = None
        self._requests: RequestsWindow | None = None
        self._settings: SettingsDialog | None = None
        self._welcome_dialog: WelcomeDialog | None = None
        self._move_dialog: MoveDialog | None = None
        self._welcome_due = False
        self._recommended: CatalogEntry | None = None
        menu = self.tray.menu
        menu.open_chat.connect(self.show_chat)
        menu.open_models.connect(self.show_models)
        menu.open_requests.connect(self.show_requests)
        menu.open_settings.connect(self.show_settings)
        menu.quit_requested.connect(self.quit)
        self.controller.server_changed.connect(self._maybe_welcome)

    def start(self) -> None:
        self.controller.start()
        if self.controller.moving is not None:  # an old store moves: show how far it got
            self._move_dialog = MoveDialog(self.controller)
            _present(self._move_dialog)
        if QSystemTrayIcon.isSystemTrayAvailable():
            self.tray.show()
        else:
            # GNOME without the AppIndicator extension, for one: an icon nobody could see.
            logger.warning("no system tray here: showing the chat window instead")
            chat = self.chat
            chat.escape_hides = False  # nothing could bring it back
            chat.closed.connect(self.quit)  # and nothing else offers Quit
            chat.notice.show_notice(NO_TRAY_NOTICE)
            self.show_chat()
        if not self.controller.state.welcomed and len(self.controller.models()) <= 1:
            Job(
                self.tasks,
                _recommendation,
                what="recommend a model for this machine",
                success=self._on_recommendation,
                failure=self._no_recommendation,
                expected=(Exception,),  # any failure: the welcome shows no recommendation
            ).run()

    def quit(self) -> None:
        """Quit; while a download, conversion or tools installation runs, ask first (its
        finished part is kept, and it resumes next time)."""
        running = self.running_work()
        if running is not None:
            asked = QMessageBox.question(
                None,
                "Quit Sidelight?",
                f"{running} is still running. Quit anyway? What it finished is kept, and "
                "starting it again later resumes it.",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                QMessageBox.StandardButton.No,
            )
            if asked != QMessageBox.StandardButton.Yes:
                return
        QApplication.quit()

    def running_work(self) -> str | None:
        """What quitting would interrupt, in words (None: nothing)."""
        models = self._models
        if models is None:
            return None
        if models.tools.installing:
            return "Installing the conversion tools"
        if models.busy:
            return "A model download or conversion"
        return None

    def shutdown(self) -> None:
        """Stop replies, the server and the engine (after the event loop ended)."""
        if self._chat is not None:
            self._chat.stop()
        if self._models is not None:
            self._models.cancel_job()  # a download keeps its partial files for next time
        self.tray.hide()
        self.controller.shutdown()
        self.tasks.shutdown()

    # ---- windows -----------------------------------------------------------------------

    @property
    def chat(self) -> ChatWindow:
        if self._chat is None:
            chat = ChatWindow(self.controller, self.tasks, self.history, self.chat_options)
            chat.open_settings.connect(self.show_settings)
            chat.open_models.connect(self.show_models)
            chat.open_catalog.connect(self.show_models)
            chat.open_requests.connect(self.show_requests)
            chat.quit_requested.connect(self.quit)
            self._chat = chat
        return self._chat

    def show_chat(self) -> None:
        self.chat.show_and_raise()

    def models_dialog(self) -> ModelManager:
        if self._models is None:
            self._models = ModelManager(self.controller, self.tasks, hub_endpoint=self.hub_endpoint)
        return self._models

    def show_models(self, entry_id: str | None = None) -> None:
        dialog = self.models_dialog()
        if entry_id:
            dialog.select_entry(entry_id)
        _present(dialog)

    @property
    def requests_window(self) -> RequestsWindow:
        if self._requests is None:
            self._requests = RequestsWindow(self.controller)
        return self._requests

    def show_requests(self) -> None:
        _present(self.requests_window)

    def show_settings(self) -> None:
        if self._settings is None or not self._settings.isVisible():
            self._settings = SettingsDialog(self.controller, self.autostart)
            self._settings.theme_chosen.connect(self._on_theme_chosen)
        _present(self._settings)

    def _on_theme_chosen(self, choice: str) -> None:
        self.theme.set_choice(theme_choice(choice))

    def _on_recommendation(self, recommended: CatalogEntry | None) -> None:
        self._recommended = recommended
        self._recommendation_known()

    def _no_recommendation(self, exc: Exception) -> None:
        logger.warning("no recommendation for this machine", exc_info=exc)
        self._recommendation_known()

    def _recommendation_known(self) -> None:
        self._welcome_due = True
        self._maybe_welcome()

    def _maybe_welcome(self) -> None:
        """Show the first-run welcome once the recommendation and the server are both known."""
        controller = self.controller
        if not self._welcome_due or (controller.server_url or controller.server_error) is None:
            return
        self._welcome_due = False
        controller.state.welcomed = True
        controller.state.save(controller.settings.paths.config_dir)
        recommended = self._recommended
        dialog = WelcomeDialog(controller.api_base_url, recommended, in_tray=self.tray.isVisible())
        dialog.accepted.connect(lambda: self.show_models(recommended.id if recommended else None))
        dialog.setModal(False)
        dialog.show()
        self._welcome_dialog = dialog


def _present(window: QWidget) -> None:
    window.show()
    window.raise_()
    window.activateWindow()


def _recommendation() -> CatalogEntry | None:
    return Catalog.load().recommend(MachineInfo.detect())


def _quit_on_signals(app: QApplication) -> QTimer:
    """Quit cleanly on Ctrl+C / SIGTERM (when started from a terminal or a service).

    Python runs signal handlers only when it holds control, so a timer wakes it regularly
    while Qt's event loop runs.
    """

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logger.info("signal %d: quitting", signum)
        app.quit()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    timer = QTimer()
    timer.timeout.connect(lambda: None)
    timer.start(250)
    return timer


def run(settings: Settings) -> int:
    """Run the tray app until Quit; returns the exit code."""
    try:
        settings.validate()
        settings.paths.ensure()
    except (SettingsError, OSError) as exc:
        logger.error("cannot start: %s", exc)
        return 2
    log_file = setup_logging(settings.paths.log_dir, settings.log_level)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(app, QApplication)
    app.setApplicationName("Sidelight")
    app.setApplicationDisplayName("Sidelight")
    app.setWindowIcon(icon(""))
    app.setQuitOnLastWindowClosed(False)
    collector = collect_on_gui_thread(app)
    guard = SingleInstance(instance_name(settings.paths.config_dir))
    if guard.notify_running():
        logger.info("Sidelight is already running; brought its chat window forward")
        return 0
    guard.listen()
    desktop = DesktopApp(settings)
    guard.activated.connect(desktop.show_chat)
    desktop.start()
    logger.info("Sidelight started (log: %s)", log_file)
    wake = _quit_on_signals(app)
    code = app.exec()
    wake.stop()
    desktop.shutdown()
    guard.close()
    collector.stop()
    return int(code)
