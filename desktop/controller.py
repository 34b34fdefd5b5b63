"""``Controller``: the app's engine, HTTP server, model store and devices, seen from Qt.

Views observe it through signals and call its methods; it never touches a widget. Engine
status arrives on the engine's reader thread and is re-emitted on the GUI thread; the server
start, device discovery, model specs, unloads, moving an old store and the CPU self-tune run
on the task manager's pool, each as a :class:`desktop.jobs.Job` (its outcome on the GUI
thread). An error nobody expected at a site that never caught one is logged with its
traceback (by the job) and changes nothing else, as before.

Start-up chores (:attr:`Controller.chore` says which, for the tray and the chat):

* A store left in the old place (the cache folder) moves to the data folder in the
  background (:mod:`engine.store.relocate`, atomic per model); the last model loads as soon
  as it has moved. Quitting stops the move between chunks; the next start resumes it.
* The CPU self-tune (:mod:`engine.cpu_tune`) runs once per CPU and OpenVINO version, after
  the first model is ready: the chat is usable at once with OpenVINO's defaults, and the
  tuned properties apply from the next model load. Tuning first would keep a new user
  waiting before their first reply for a gain they only notice on real models, which they
  load later anyway; tuning while a model loads would skew the measurement.

Threading: create and call on the GUI thread; its signals are emitted on the GUI thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from desktop.jobs import Job
from desktop.log_tail import log_tail
from desktop.speech import SpeechModels, speech_models
from desktop.state import DesktopState
from desktop.taskman import TaskManager
from engine import cpu_tune
from engine.devices import DeviceInfo, discover_devices
from engine.models import DEMO_MODEL_ID, GENERATIVE_TASKS, ModelError, ModelSpec, spec_from_path
from engine.resources import demo_model_path
from engine.runtime import ModelInfo, Runtime, ServedEngine, TuneDisturbed, tune_timing
from engine.server.monitor import RequestMonitor
from engine.server.pipeline import Pipeline
from engine.server.runner import PortInUseError
from engine.settings import Settings, save_config
from engine.store import ModelStore, StoreError
from engine.store.relocate import MoveProgress, pending_move
from engine.supervisor.states import (
    ERROR,
    LOADING,
    READY,
    EngineStatus,
    EngineUnavailable,
    LoadedModel,
    NoRoom,
)
from engine.supervisor.unloads import UnloadEvent

logger = logging.getLogger(__name__)

# A load that takes longer than this ends with a notification (the person may have looked away).
LONG_LOAD_SECONDS = 5.0
_ACTIVITY_POLL_MS = 300
REMOTE_MARK = " — remote"  # after a remote model's MODEL@NAME in the picker and the tray
_RECENT_UNLOADS = 5  # unload events the tray shows
TUNING_TEXT = "Tuning for this CPU… (first start only, a few seconds)"
# Why a server did not start: said to the person. Anything else is a bug (logged).
_SERVER_ERRORS: tuple[type[Exception], ...] = (RuntimeError, OSError)


def move_text(progress: MoveProgress) -> str:
    """``Moving models… 2 of 5, 3.4 of 12.0 GB``: what the tray and the chat say."""
    gb = 1 << 30
    return (
        f"Moving models to the data folder… {progress.models_done} of "
        f"{progress.models_total}, {progress.bytes_done / gb:.1f} of "
        f"{progress.bytes_total / gb:.1f} GB"
    )


@dataclass(frozen=True)
class ModelChoice:
    """A model the person can pick: the demo model or one from the store."""

    id: str
    label: str
    path: Path
    devices: tuple[str, ...]  # device families it runs on: "CPU", "GPU", "NPU"
    is_demo: bool = False
    vision: bool = False  # a vision-language model: it sees images too
    remote: str | None = None  # MODEL@NAME: remote server NAME answers it (nothing loads here)

    def runs_on(self, device: DeviceInfo) -> bool:
        return device.kind.upper() in self.devices


def server_error_text(
    exc: BaseException, settings: Settings, *, where: str = " in Settings"
) -> str:
    """Why the server did not start, in words for the tray and the Settings dialog."""
    if isinstance(exc, PortInUseError):
        return (
            f"Port {settings.port} on {settings.host} is already in use by another program; "
            f"pick another port{where}."
        )
    return str(exc)


def remote_choices(infos: list[ModelInfo]) -> list[ModelChoice]:
    """The remote servers' chat models, as the picker and the tray offer them."""
    return [
        ModelChoice(
            id=info.id,
            label=f"{info.id}{REMOTE_MARK}",
            path=info.path,
            devices=(),
            remote=info.remote,
        )
        for info in infos
        if info.remote and info.task in GENERATIVE_TASKS
    ]


def demo_choice() -> ModelChoice:
    return ModelChoice(
        id=DEMO_MODEL_ID,
        label="Demo model (tiny, offline)",
        path=demo_model_path(),
        devices=("CPU", "GPU"),
        is_demo=True,
    )


class Controller(QObject):
    """Owns what the tray, the chat window and the dialogs share."""

    status_changed = Signal(object)  # EngineStatus
    server_changed = Signal()
    devices_changed = Signal()
    models_changed = Signal()
    activity_changed = Signal(bool)  # True while any reply (chat or HTTP) is generating
    notify = Signal(str, str, bool)  # title, message, is_error
    chore_changed = Signal()  # the start-up chore (moving models, tuning) began/moved/ended
    move_progress = Signal(object)  # MoveProgress, while an old store moves
    move_finished = Signal(object)  # None, or the error text when the move stopped on one
    model_unloaded = Signal(object)  # UnloadEvent: a model went away (idle, evicted, ...)
    loading_changed = Signal()  # the models being loaded changed (loading_models)

    def __init__(
        self,
        settings: Settings,
        tasks: TaskManager,
        *,
        engine: ServedEngine | None = None,
        devices: list[DeviceInfo] | None = None,
        parent: QObject | None = None,
    ) -> None:
        """Args:
        settings: the settings the app started with.
        tasks: the app's task manager.
        engine: an engine to use instead of starting one (it is then not closed here).
        devices: skip device discovery and offer these (tests; discovery is slow).
        """
        super().__init__(parent)
        self.tasks = tasks
        # The engine's one front door: store, scheduler, default model, the one pipeline
        # (the chat's and every server's), the request monitor (kept across server
        # restarts: the Requests window reads it), the start-up chores and the server.
        self.runtime = Runtime(settings, engine=engine)
        # The picker always offers the demo model: the API must serve it whatever the folder.
        try:
            self.runtime.offer(spec_from_path(demo_model_path(), model_id=DEMO_MODEL_ID))
        except ModelError as exc:
            logger.warning("the built-in demo model cannot be served: %s", exc)
        self.state = DesktopState.load(settings.paths.config_dir)
        self.devices: list[DeviceInfo] | None = devices
        self.server_url: str | None = None
        self.server_error: str | None = None
        self.status = self.runtime.default.status()
        self.last_notification: tuple[str, str, bool] | None = None
        self._models: list[ModelChoice] = []
        # The installed models the chat's dictation and Read aloud use.
        self.speech = SpeechModels()
        # A remote model picked in the tray: new chats answer with it (nothing loads; the
        # default model stays). Picking a local model clears it.
        self.remote_default: str | None = None
        self._load_started: float | None = None
        self._active = False
        # Start-up chores: moving an old store (start()) and the CPU self-tune (first ready).
        self.chore: str | None = None
        self.moving: MoveProgress | None = None
        self._move_cancel = threading.Event()
        self._load_after_move = False
        self._tune_started = False
        self._tuning = False
        self._busy_while_tuning = False
        self._quitting = False
        self._remove_listener = self.runtime.default.add_listener(self._on_engine_status)
        # Why models went away (newest last), for the tray's tooltip and "In memory" menu.
        scheduler = self.runtime.scheduler
        self.unloads: list[UnloadEvent] = scheduler.recent_unloads()[-_RECENT_UNLOADS:]
        self.loading_models: list[str] = []  # any model a worker is loading, default or not
        self._remove_unload_listener = scheduler.add_unload_listener(self._on_unloaded)
        self._activity_timer = QTimer(self)
        self._activity_timer.setInterval(_ACTIVITY_POLL_MS)
        self._activity_timer.timeout.connect(self._poll_activity)
        self.notify.connect(self._remember_notification)
        self.refresh_models()

    # ---- what the runtime holds --------------------------------------------------------

    @property
    def settings(self) -> Settings:
        """The settings in use (they change when Settings are applied)."""
        return self.runtime.settings

    @property
    def engine(self) -> ServedEngine:
        """The engine: every model's worker and the default model's view."""
        return self.runtime.engine

    @property
    def store(self) -> ModelStore:
        return self.runtime.store

    @property
    def monitor(self) -> RequestMonitor:
        """Metrics and the request log of the chat's and every server's requests."""
        return self.runtime.monitor

    @property
    def pipeline(self) -> Pipeline:
        """The one request pipeline the chat window and the HTTP server share."""
        return self.runtime.pipeline

    @pipeline.setter
    def pipeline(self, pipeline: Pipeline) -> None:
        self.runtime.pipeline = pipeline

    # ---- start and stop ----------------------------------------------------------------

    def start(self) -> None:
        """Start the engine, the HTTP server and device discovery; load the last model."""
        log_tail()  # the server view's live log keeps the lines from here on
        self._activity_timer.start()
        self.runtime.remotes.start()  # idempotent: also when the engine is borrowed (tests)
        if self.devices is None:
            Job(
                self.tasks,
                discover_devices,
                what="discover the OpenVINO devices",
                success=self._on_devices,
                failure=self._no_devices,
                expected=(),  # any failure: logged with its traceback, then said
            ).run()
        self.start_server()
        if pending_move(self.settings.paths):
            self._start_move()
        if self.runtime.owns_engine:
            Job(
                self.tasks,
                self.runtime.start,
                what="start the engine",
                success=lambda _: self._load_last(),
                failure=lambda _: self._load_last(),  # logged; the load says what is wrong
                expected=(),
            ).run()
        else:
            self._load_last()

    def shutdown(self) -> None:
        """Stop the server and (if it is ours) the engine; blocks for a few seconds at most."""
        self._activity_timer.stop()
        self._move_cancel.set()  # the move stops between chunks; the next start resumes
        self._quitting = True  # a running self-tune stops after its current measurement
        self._remove_listener()
        self._remove_unload_listener()
        self.runtime.close()  # the server; the engine too when it is the runtime's own
        self.state.save(self.settings.paths.config_dir)

    def _load_last(self) -> None:
        wanted = self.state.last_model
        known = {m.id for m in self._models}
        old = self.settings.paths.legacy_models_dir
        still_old = old is not None and bool(wanted) and (old / str(wanted)).is_dir()
        if wanted not in known and self.moving is not None and still_old:
            self._load_after_move = True  # load it as soon as it has moved
            logger.info("loading %s once it has moved to the data folder", wanted)
            return
        self._load_after_move = False
        if wanted not in known:
            if wanted:
                logger.warning("the last model %s is gone; loading the demo model", wanted)
            wanted = DEMO_MODEL_ID
        device = self.state.last_device or self.settings.device
        status = self.runtime.default.status()
        model = status.model.id if status.model else None
        if (status.state, model, status.device) == (READY, wanted, device):
            self._apply_status(status)  # an engine handed over ready: nothing to load
            return
        self.select_model(wanted, device)

    # ---- start-up chores: moving an old store, the CPU self-tune -----------------------

    def _set_chore(self, text: str | None) -> None:
        if text != self.chore:
            self.chore = text
            self.chore_changed.emit()

    def _start_move(self) -> None:
        """Move the old store to the data folder off the GUI thread, reporting progress."""
        chores, cancel = self.runtime.chores, self._move_cancel
        self.moving = MoveProgress(0, 0, 0, 0)
        self._set_chore("Moving models to the data folder…")

        def move(report: Callable[[MoveProgress], None]) -> OSError | None:  # a pool thread
            return chores.move_store(report=report, cancel=cancel)

        Job.with_progress(
            self.tasks,
            move,
            self._on_move_progress,
            what="move the models to the data folder",
            success=self._on_move_done,
            # Not an OSError returned: a bug (logged with its traceback), but the app goes on.
            failure=lambda exc: self._on_move_done(OSError(str(exc))),
            expected=(),
        ).run()

    def _on_move_progress(self, progress: MoveProgress) -> None:
        if self.moving is None:
            return  # the move has ended (the job drops later reports too)
        models_moved = progress.models_done != self.moving.models_done
        self.moving = progress
        self._set_chore(move_text(progress))
        self.move_progress.emit(progress)
        if models_moved:
            self.refresh_models()  # each moved model is usable at once
            if self._load_after_move and self.state.last_model in {m.id for m in self._models}:
                self._load_last()

    def _on_move_done(self, error: OSError | None) -> None:
        text = None
        if error is not None:
            reason = error.strerror or str(error)  # "No space left on device", not "[Errno 28]…"
            text = (
                f"Some models are still in {self.settings.paths.legacy_models_dir}: {reason}. "
                "Sidelight tries again at the next start."
            )
        self.moving = None
        self._set_chore(None)
        self.refresh_models()
        if text is not None:
            self.notify.emit("Models not moved", text, True)
        self.move_finished.emit(text)
        if self._load_after_move:
            self._load_last()

    def cancel_move(self) -> None:
        """Stop moving the old store (between chunks); the next start resumes."""
        self._move_cancel.set()

    def _maybe_tune(self, status: EngineStatus) -> None:
        """Start the CPU self-tune once, after the first CPU model is ready, unless cached
        (:func:`engine.runtime.tune_timing`: with a person at the window, after ready)."""
        device = status.device or ""
        timing = tune_timing(self.settings, device, interactive=True)
        if self._tune_started or timing != "after_ready":
            return
        self._tune_started = True
        # Set here, read by the tune's thread (plain bools): a reply seen by the activity
        # poll while tuning makes the tune give up rather than cache skewed figures.
        self._tuning, self._busy_while_tuning = True, self._active
        chores, tasks = self.runtime.chores, self.tasks

        def started() -> None:
            if self._tuning:
                self._set_chore(TUNING_TEXT)

        def disturbed() -> str | None:  # the tune's thread
            if self._quitting:
                return "the app is quitting"
            if self._busy_while_tuning:
                return "a reply ran while the self-tune measured"
            return None

        def tune() -> cpu_tune.TuneResult | None:  # a pool thread: no widgets
            return chores.tune(on_start=lambda: tasks.run_on_main(started), disturbed=disturbed)

        Job(
            self.tasks,
            tune,
            what="tune the CPU",
            success=self._on_tuned,
            failure=self._tune_failed,
            expected=(TuneDisturbed,),  # anything else: logged with its traceback
        ).run()

    def _tune_ended(self) -> None:
        self._tuning = False
        self._set_chore(None)

    def _tune_failed(self, exc: Exception) -> None:
        self._tune_ended()
        if isinstance(exc, TuneDisturbed):
            logger.info("CPU self-tune skipped (%s); it runs again at the next start", exc)
        else:  # a failed tune leaves OpenVINO's defaults, never the app down
            logger.error("CPU self-tune failed; keeping the configured CPU properties")

    def _on_tuned(self, result: cpu_tune.TuneResult | None) -> None:
        self._tune_ended()
        if result is not None:
            logger.info(
                "CPU tuned: %s; it applies from the next model load",
                result.properties or "OpenVINO's defaults",
            )

    # ---- the HTTP server ---------------------------------------------------------------

    def start_server(self) -> None:
        """Start the server with the current settings, off the GUI thread."""
        Job(
            self.tasks,
            self.runtime.start_server,
            what="start the server",
            success=self._on_server_started,
            failure=self._server_not_started,
            expected=_SERVER_ERRORS,
        ).run()

    def stop_server(self) -> None:
        """Stop the HTTP server (the server view's switch), off the GUI thread; the chat
        window keeps working (it does not go through HTTP). :meth:`start_server` starts it
        again with the current settings."""

        def stopped(_none: None) -> None:
            self.server_url, self.server_error = None, None
            logger.info("the server was stopped; apps cannot reach Sidelight until it starts")
            self.server_changed.emit()

        Job(
            self.tasks,
            self.runtime.stop_server,
            what="stop the server",
            success=stopped,
            expected=(),  # a failure is a bug: logged with its traceback
        ).run()

    def _on_server_started(self, url: str) -> None:
        self.server_url, self.server_error = url, None
        logger.info("serving on %s/v1", self.server_url)
        self.server_changed.emit()

    def _server_not_started(self, exc: Exception) -> None:
        if not isinstance(exc, _SERVER_ERRORS):
            return  # a bug, logged with its traceback by the job; nothing changes
        self.server_url, self.server_error = None, server_error_text(exc, self.settings)
        self.notify.emit("Sidelight server not started", self.server_error, True)
        self.server_changed.emit()

    @property
    def api_base_url(self) -> str | None:
        return f"{self.server_url}/v1" if self.server_url else None

    # ---- models and devices ------------------------------------------------------------

    def models(self) -> list[ModelChoice]:
        return list(self._models)

    def refresh_models(self) -> None:
        """Re-read the store (a few small manifest files) and tell the views."""
        choices = [demo_choice()]
        try:
            stored = self.store.list()
        except (StoreError, OSError) as exc:
            logger.warning("cannot list the model store: %s", exc)
            stored = []
        choices.extend(
            ModelChoice(
                id=m.id,
                # The picker marks the models that see.
                label=f"{m.manifest.name} (sees images)"
                if m.manifest.task == "vision"
                else m.manifest.name,
                path=m.path,
                devices=tuple(d.upper() for d in m.manifest.devices),
                vision=m.manifest.task == "vision",
            )
            for m in stored
            if m.manifest.task in GENERATIVE_TASKS
        )
        choices.extend(remote_choices(self.runtime.remotes.infos()))
        speech = speech_models(stored)
        if choices != self._models or speech != self.speech:
            self._models, self.speech = choices, speech
            self.models_changed.emit()

    def choice(self, model_id: str | None) -> ModelChoice | None:
        return next((m for m in self._models if m.id == model_id), None)

    @property
    def active_model_id(self) -> str | None:
        return self.status.model.id if self.status.model else None

    @property
    def active_device(self) -> str | None:
        return self.status.device

    @property
    def chat_default_id(self) -> str | None:
        """The model a chat without its own pick answers with: the remote model picked in
        the tray while it is listed, else the default (loaded) model."""
        if self.remote_default is not None and self.choice(self.remote_default) is not None:
            return self.remote_default
        return self.active_model_id

    def select_model(self, model_id: str, device: str | None = None) -> None:
        """Switch to ``model_id`` (on ``device``, default: the current one); returns at once."""
        choice = self.choice(model_id)
        if choice is None:
            self.notify.emit("Model not found", f"{model_id} is not in the model store", True)
            return
        if choice.remote is not None:  # served by its remote: nothing to load here
            self.remote_default = choice.id
            self.models_changed.emit()
            return
        self.remote_default = None
        # After a failed load, fall back to the last device that worked, not the failed one.
        current = self.active_device if self.status.state != ERROR else None
        fallback = current or self.state.last_device or self.settings.device

        def spec() -> ModelSpec:  # a pool thread
            if not choice.is_demo:
                try:  # a stored model comes with its own settings (context, device, sampling)
                    return self.store.spec(choice.id)
                except StoreError:
                    pass  # not (or no longer) in the store: its files alone
            return spec_from_path(choice.path, model_id=choice.id)

        def load(spec: ModelSpec) -> None:
            self._load_started = time.monotonic()
            # A device picked in the menu wins, then the model's own, then the current one.
            self.runtime.default.load(spec, device or spec.prefs.device or fallback)

        def cannot_load(exc: Exception) -> None:
            if isinstance(exc, (ModelError, OSError)):  # else a bug: logged by the job
                self.notify.emit(f"Cannot load {choice.id}", str(exc), True)

        Job(
            self.tasks,
            spec,
            what=f"read the model {choice.id}",
            success=load,
            failure=cannot_load,
            expected=(ModelError, OSError),
        ).run()

    def loaded_models(self) -> list[LoadedModel]:
        """Every model the engine holds, each in a worker of its own (the tray lists them)."""
        return self.runtime.scheduler.loaded()

    def worker_pids(self) -> list[int]:
        """Every engine worker's process: each loaded model's, and the default model's
        (what the chat's strip measures; one worker alone undercounts)."""
        pids = {m.worker_pid for m in self.loaded_models() if m.worker_pid is not None}
        if self.status.worker_pid is not None:
            pids.add(self.status.worker_pid)
        return sorted(pids)

    def unload_model(self, model_id: str) -> None:
        """Unload ``model_id`` now, returning its memory; returns at once (its worker takes a
        moment to exit). A model answering a request stays: nothing is ever cancelled."""
        scheduler = self.runtime.scheduler

        def unload() -> bool:  # a pool thread
            return scheduler.unload(model_id, "unloaded from the tray")

        def done(unloaded: bool) -> None:
            if unloaded:
                self.models_changed.emit()
            else:
                self.notify.emit(
                    "Model busy",
                    f"{model_id} is answering a request; unload it once the reply has ended",
                    True,
                )

        # No failure handler: an error is a bug, logged with its traceback, nothing said.
        Job(self.tasks, unload, what=f"unload {model_id}", success=done, expected=()).run()

    def reload_model(self, model_id: str) -> None:
        """Load ``model_id`` again with its saved settings when it is loaded (a load setting
        changed in the model manager); returns at once. The tray's model reloads as a pick
        in the tray would; another loaded model through the scheduler, whose acquire
        reloads a model loaded with other settings (a request in flight keeps it as it is)."""
        if model_id == self.active_model_id:
            self.select_model(model_id)
            return
        loaded = next((m for m in self.loaded_models() if m.id == model_id), None)
        if loaded is None:
            return
        scheduler, store = self.runtime.scheduler, self.store

        def reload() -> None:  # a pool thread
            spec = store.spec(model_id)
            scheduler.acquire(spec, spec.prefs.device or loaded.device)

        def failed(exc: Exception) -> None:
            self.notify.emit(f"Cannot reload {model_id}", str(exc), True)

        Job(
            self.tasks,
            reload,
            what=f"reload {model_id}",
            success=lambda _none: self.models_changed.emit(),
            failure=failed,
            expected=(ModelError, StoreError, OSError, NoRoom, EngineUnavailable),
        ).run()

    def select_device(self, device: str) -> None:
        """Reload the active (or last) model on ``device``."""
        model_id = self.active_model_id or self.state.last_model or DEMO_MODEL_ID
        self.select_model(model_id, device)

    def _on_devices(self, devices: list[DeviceInfo]) -> None:
        self.devices = devices
        self.devices_changed.emit()

    def _no_devices(self, exc: Exception) -> None:
        self.devices = []
        self.notify.emit("No OpenVINO devices", str(exc), True)
        self.devices_changed.emit()

    # ---- settings ----------------------------------------------------------------------

    def apply_settings(
        self, settings: Settings, on_done: Callable[[Exception | None], None] | None = None
    ) -> None:
        """Use new settings; returns at once and calls ``on_done(None)`` once they apply.

        When the server's options moved, the new server starts first and the old one stops
        only once the new one listens. If it cannot start (a port in use...), nothing
        changes: the old server keeps serving and ``on_done`` gets the error.
        """
        runtime = self.runtime
        old_models = runtime.settings.paths.models_dir
        default = self.status.model
        if not runtime.needs_new_server(settings):
            runtime.use_settings(settings)
            self.refresh_models()
            if on_done is not None:
                on_done(None)
            return

        def not_replaced(exc: Exception) -> None:
            if not isinstance(exc, _SERVER_ERRORS):
                return  # a bug, logged with its traceback by the job; nothing changes
            logger.warning("settings not applied: the new server did not start: %s", exc)
            if runtime.server_url is None:  # the old one could not come back either
                self.server_url = None
                self.server_error = server_error_text(exc, settings)
                self.server_changed.emit()
            if on_done is not None:
                on_done(exc)

        def replaced(url: str) -> None:
            self.refresh_models()
            if settings.paths.models_dir != old_models and default is not None:
                self._reselect_after_move(default, old_models)
            self.server_url, self.server_error = url, None
            logger.info("serving on %s/v1", url)
            self.server_changed.emit()
            if on_done is not None:
                on_done(None)

        Job(
            self.tasks,
            lambda: runtime.replace_server(settings),
            what="start the server with the new settings",
            success=replaced,
            failure=not_replaced,
            expected=_SERVER_ERRORS,
        ).run()

    def _reselect_after_move(self, default: ModelSpec, old_models: Path) -> None:
        """The model folder changed: the runtime unloaded the models of the old one. If the
        default model was one, load the same id from the new folder, else the demo model,
        so that the picker, the tray and the API name the model that answers."""
        try:
            was_stored = default.path.resolve().is_relative_to(old_models.resolve())
        except OSError:
            was_stored = False
        if not was_stored:
            return  # a model from a path (or the demo) stays loaded and stays the default
        wanted = default.id if self.choice(default.id) is not None else DEMO_MODEL_ID
        logger.info("the model folder changed; loading %s", wanted)
        self.select_model(wanted, self.active_device or self.state.last_device)

    def set_keep_request_bodies(self, keep: bool) -> None:
        """Save "keep request bodies" and apply it at once (the server keeps running);
        turning it off forgets the bodies kept so far.

        Raises:
            OSError: the config file cannot be written (nothing changed).
            SettingsError: the config file is unreadable (nothing changed).
        """
        save_config(self.settings.paths, {"keep_request_bodies": keep})
        self.runtime.keep_request_bodies(keep)

    # ---- engine status -----------------------------------------------------------------

    def _on_engine_status(self, status: EngineStatus) -> None:
        """Engine reader thread: hop to the GUI thread."""
        self.tasks.run_on_main(lambda: self._apply_status(status))

    def _apply_status(self, status: EngineStatus) -> None:
        previous, self.status = self.status, status
        # Ready, or ready with another model: with one worker per model a switch may go from
        # one ready model to the next without a loading status in between.
        switched = previous.model is None or previous.model.id != (status.model and status.model.id)
        if (
            status.state == READY
            and status.model is not None
            and (previous.state != READY or switched)
        ):
            self.state.last_model, self.state.last_device = status.model.id, status.device
            self.state.save(self.settings.paths.config_dir)
            if self._load_started and time.monotonic() - self._load_started > LONG_LOAD_SECONDS:
                self.notify.emit("Model ready", f"{status.model.id} on {status.device}", False)
            self._load_started = None
        elif status.state == ERROR and previous.state != ERROR:
            self._load_started = None
            self.notify.emit("Sidelight engine error", status.message or "unknown error", True)
        elif status.state == LOADING and self._load_started is None:
            self._load_started = time.monotonic()
        if status.state == READY:
            self._maybe_tune(status)  # once; also for an engine handed over ready
        self.status_changed.emit(status)

    def _on_unloaded(self, event: UnloadEvent) -> None:
        """Engine thread: a model went away; hop to the GUI thread."""
        self.tasks.run_on_main(lambda: self._apply_unloaded(event))

    def _apply_unloaded(self, event: UnloadEvent) -> None:
        """Keep the event for the tray and say it once in a notification (not for an unload
        the user asked for: they know)."""
        self.unloads = [*self.unloads, event][-_RECENT_UNLOADS:]
        if event.reason != "requested":
            crashed = event.reason == "crashed"
            title = "Model stopped" if crashed else "Model unloaded"
            self.notify.emit(title, event.text(), crashed)
        self.model_unloaded.emit(event)

    def _poll_activity(self) -> None:
        # The engine reports state changes, not request starts: poll its cheap counters
        # (every loaded model's: each has a worker of its own).
        scheduler = self.runtime.scheduler
        active = scheduler.active_requests() > 0
        loading = scheduler.loading()
        if loading != self.loading_models:
            self.loading_models = loading
            self.loading_changed.emit()
        if active and self._tuning:
            self._busy_while_tuning = True
        if active != self._active:
            self._active = active
            self.activity_changed.emit(active)
        # The remotes' lists are refreshed on their own thread: a change reaches the views.
        remote = remote_choices(self.runtime.remotes.infos())
        if remote != [m for m in self._models if m.remote is not None]:
            self.refresh_models()

    @property
    def generating(self) -> bool:
        return self._active

    def _remember_notification(self, title: str, message: str, is_error: bool) -> None:
        self.last_notification = (title, message, is_error)
        (logger.warning if is_error else logger.info)("%s: %s", title, message)
