"""``Runtime``: the engine's one front door, built the same way by the CLI, the tray app
and the end-to-end tests.

It composes, once, everything a running Sidelight holds: the model store, the scheduler
(one worker per loaded model), the default model's view, **one** request pipeline (every
dialect and the chat window generate through it), the request monitor (metrics and the
request log, which outlive a server restart), the start-up chores, and the HTTP server
(uvicorn on a thread) with its replace-with-rollback. Nothing above it builds any of these.

Settings that move the store or the server replace the pipeline and the server together
(:meth:`Runtime.replace_server`); the old server keeps serving until the new one listens,
and comes back when the new one cannot start.

Threading: build it on any thread. :meth:`start_server`, :meth:`replace_server`,
:meth:`stop_server` and :meth:`close` block (uvicorn starts and stops, workers exit): call
them off the GUI thread; they are serialised by one lock. Properties are plain reads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from starlette.applications import Starlette

from engine.models import ModelSpec
from engine.runtime.chores import StartupChores
from engine.runtime.default_model import DefaultModel
from engine.runtime.served import ServedEngine
from engine.server.app import create_app
from engine.server.monitor import RequestMonitor
from engine.server.pipeline import Pipeline
from engine.server.remote import RemoteCatalog
from engine.server.runner import ServerRunner
from engine.settings import Settings
from engine.store import ModelStore
from engine.supervisor.client import EngineClient
from engine.supervisor.scheduler import Scheduler
from engine.supervisor.states import EngineStatus

logger = logging.getLogger(__name__)

# The settings a running server was built from: a change to one of them needs a new server.
SERVER_KEYS = ("host", "port", "api_key", "allowed_origins", "allowed_hosts")


class Runtime:
    """Store, scheduler, default model, one pipeline, monitor, chores and the server.

    Args:
        settings: the settings to start with.
        backend: every worker's backend ("auto", "batched", "serial").
        client_factory: builds each model's client (tests of the scheduler's own logic).
        engine: run on this engine (its scheduler and default model) instead of a new one;
            it is then not closed here (tests share one engine across several apps).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        backend: str = "auto",
        client_factory: Callable[[Settings], EngineClient] | None = None,
        engine: ServedEngine | None = None,
    ) -> None:
        self.settings = settings
        self.owns_engine = engine is None
        if engine is None:
            scheduler = Scheduler(settings, backend=backend, client_factory=client_factory)
            engine = ServedEngine(scheduler, DefaultModel(scheduler, settings))
        self.engine = engine
        self.scheduler, self.default = engine.scheduler, engine.default
        self.store = ModelStore.from_settings(settings)
        self.monitor = RequestMonitor(self.default.status, keep_bodies=settings.keep_request_bodies)
        # Remote servers' models (MODEL@NAME): one catalog, its refresher started by start().
        self.remotes = RemoteCatalog(settings)
        self.pipeline = Pipeline(self.engine, self.store, self.monitor, self.remotes)
        self.chores = StartupChores(settings, self.default)
        self._server_lock = threading.Lock()
        self._runner: ServerRunner | None = None
        self._offered: dict[str, ModelSpec] = {}  # served by id from no store (see offer)
        # The default model may come from a path, not the store: the pipeline must know it
        # by id even when it is unloaded before any request named it.
        self._undo_note = self.default.add_listener(self._note_default)
        self._note_default(self.default.status())

    # ---- the engine --------------------------------------------------------------------

    def start(self) -> None:
        """Ready to load models (no worker starts until one is asked for); the remotes'
        listings start refreshing in the background."""
        self.scheduler.start()
        self.remotes.start()

    def close(self) -> None:
        """Stop the server, then (when it is this runtime's own) every worker: in-flight
        requests end with an error."""
        self.stop_server()
        self.remotes.close()
        self._undo_note()
        if self.owns_engine:
            self.default.detach()
            self.scheduler.close()

    # ---- the HTTP server ---------------------------------------------------------------

    @property
    def server_url(self) -> str | None:
        """The running server's base URL (``http://127.0.0.1:11680``), or None."""
        runner = self._runner
        return runner.url if runner is not None else None

    @property
    def bind_url(self) -> str | None:
        """The address the running server is bound to, or None."""
        runner = self._runner
        return runner.bind_url if runner is not None else None

    def build_app(self) -> Starlette:
        """The HTTP app over this runtime's one pipeline (tests serve it in process)."""
        return create_app(self.settings, self.engine, self.pipeline)

    def start_server(self) -> str:
        """Start the server with the current settings (stopping a running one first);
        returns its URL (blocks until it listens).

        Raises:
            PortInUseError, RuntimeError, OSError: it did not start.
        """
        with self._server_lock:
            if self._runner is not None:
                self._runner.stop()
                self._runner = None
            runner = ServerRunner(self.build_app(), self.settings.host, self.settings.port)
            runner.start()
            self._runner = runner
            return runner.url

    def stop_server(self) -> None:
        """Stop the server if one runs (blocks while uvicorn shuts down)."""
        with self._server_lock:
            if self._runner is not None:
                self._runner.stop()
                self._runner = None

    def needs_new_server(self, settings: Settings) -> bool:
        """Whether serving ``settings`` takes a new server (and pipeline): the server's own
        options or the store's folder moved."""
        old = self.settings
        moved = old.paths.models_dir != settings.paths.models_dir  # the server lists the store
        return moved or any(getattr(old, k) != getattr(settings, k) for k in SERVER_KEYS)

    def offer(self, spec: ModelSpec) -> None:
        """Serve ``spec`` by its id though no store holds it (the tray offers the built-in
        demo model whatever the model folder): listed and loadable through every API, and
        kept when the server is replaced. Any thread."""
        self._offered[spec.id] = spec
        self.pipeline.models.seen.setdefault(spec.id, spec)

    def replace_server(self, settings: Settings) -> str:
        """Serve ``settings``: a new store, pipeline and server; the old server stops only
        once the new one listens. Returns the new URL (blocks).

        On the same port the old server must let go of it first; if the new one then
        fails, the old one is started again and everything stays as it was.

        When the model folder changed, the models loaded from the old one are unloaded
        (:meth:`_drop_models_under`): the API and the tray then name only models the new
        folder (or a path, or :meth:`offer`) holds, and a request for an old one is a 404,
        not an answer from a model nobody sees.

        Raises:
            PortInUseError, RuntimeError, OSError: the new server did not start (the old
                one, if any, still serves).
        """
        old_root = self.store.root.resolve()
        moved = self.settings.paths.models_dir != settings.paths.models_dir
        store = ModelStore.from_settings(settings)
        pipeline = Pipeline(self.engine, store, self.monitor, self.remotes)
        for model_id, spec in self.pipeline.models.seen.items():  # models loaded from a path
            if not (moved and _under(spec, old_root)):
                pipeline.models.seen.setdefault(model_id, spec)
        pipeline.models.seen.update(self._offered)
        with self._server_lock:
            old = self._runner
            runner = ServerRunner(
                create_app(settings, self.engine, pipeline), settings.host, settings.port
            )
            same_port = old is not None and settings.port == old.port
            if old is not None and same_port:
                old.stop()
            try:
                runner.start()
            except (RuntimeError, OSError):
                if old is not None and same_port:
                    self._runner = None
                    again = ServerRunner(self.build_app(), old.host, old.port)
                    again.start()
                    self._runner = again
                raise
            if old is not None and not same_port:
                old.stop()
            self._runner = runner
            self._use(settings, store, pipeline)
        if moved:
            self._drop_models_under(old_root)
        return runner.url

    def use_settings(self, settings: Settings) -> None:
        """Take settings that need no new server (see :meth:`needs_new_server`): the
        pipeline and the server stay; the request monitor's options apply at once."""
        self._use(settings, self.store, self.pipeline)

    def keep_request_bodies(self, keep: bool) -> None:
        """Keep request bodies in the log (or forget the ones kept), at once."""
        self.settings = replace(self.settings, keep_request_bodies=keep)
        self.monitor.set_keep_bodies(keep)

    def _note_default(self, status: EngineStatus) -> None:
        """Default-model listener (any thread, perhaps under a client's lock: a dict write)."""
        if status.model is not None:
            self.pipeline.models.seen.setdefault(status.model.id, status.model)

    def _drop_models_under(self, root: Path) -> list[str]:
        """Unload every model whose files are under ``root`` (an old model folder); a model
        answering a request finishes it and goes at its idle time. Returns the ids unloaded
        (blocks while their workers exit)."""
        dropped = []
        for loaded in self.scheduler.loaded():
            client = self.scheduler.client(loaded.id)
            spec = client.status().model if client is not None else None
            if spec is None or not _under(spec, root):
                continue
            if self.scheduler.unload(loaded.id, "the model folder changed", "requested"):
                dropped.append(loaded.id)
            else:
                logger.info("%s is answering a request; it unloads when idle", loaded.id)
        return dropped

    def _use(self, settings: Settings, store: ModelStore, pipeline: Pipeline) -> None:
        self.settings, self.store, self.pipeline = settings, store, pipeline
        self.monitor.set_keep_bodies(settings.keep_request_bodies)


def _under(spec: ModelSpec, root: Path) -> bool:
    try:
        return spec.path.resolve().is_relative_to(root)
    except OSError:
        return False
