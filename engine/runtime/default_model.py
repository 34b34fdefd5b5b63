"""The one-model view: the *default* model the CLI served or the tray picked.

The tray's icon and menu, the chat window's status strip and ``/health``'s top-level fields
speak of one model, though the scheduler holds many. :class:`DefaultModel` is that view,
built over the scheduler's public API alone: it asks the scheduler to place the model
(:meth:`Scheduler.acquire` on a thread, the way a request would), marks it preferred
(:meth:`Scheduler.prefer`), holds its requests while start-up work comes first
(:meth:`Scheduler.hold`), and learns from the scheduler's change and unload events why the
model has no worker when it has none.

Its status, when the model has a worker, is that worker's. Without one it is ``loading``
(being placed), ``idle`` with ``unloaded`` set (it was placed, then went: healthy, the next
request loads it again) or ``error`` (it could never be placed: no room beside busy models,
the engine closing), as a worker reports its own failed load.

Threading: every method is safe on any thread; :meth:`release` and :meth:`revive` block
briefly (a worker exits or spawns). Status listeners run on whichever thread saw the change
(perhaps under a client's lock) and must not block. This object's lock is a leaf: it is
never held while calling the scheduler.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

from engine.listeners import Listeners
from engine.models import ModelSpec
from engine.settings import Settings
from engine.supervisor.client import EngineClient
from engine.supervisor.scheduler import Scheduler, model_key
from engine.supervisor.states import (
    ERROR,
    IDLE,
    LOADING,
    STOPPED,
    CrashHistory,
    EngineState,
    EngineStatus,
    EngineUnavailable,
    NoRoom,
)
from engine.supervisor.unloads import UnloadEvent

logger = logging.getLogger(__name__)

PLACE_WAIT_SECONDS = 600.0  # the least a default model's load waits for room and its load
_POLL_SECONDS = 0.1  # wait_for's look-again interval when no change is heard


@dataclass(frozen=True)
class _Gone:
    """Why the default model has no worker: ``unloaded`` when it was placed then went (idle,
    evicted, unloaded by hand), ``not_loaded`` when it could never be placed; ``reason``
    says it in words."""

    how: Literal["unloaded", "not_loaded"]
    reason: str


class DefaultModel:
    """The default model's view over ``scheduler`` (see the module docstring)."""

    def __init__(self, scheduler: Scheduler, settings: Settings) -> None:
        self._scheduler = scheduler
        self._settings = settings
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._spec: ModelSpec | None = None
        self._gone: _Gone | None = None
        self._placing = False  # load() placing it on a thread, or expect_load() said so
        self._why: str | None = None  # expect_load()'s reason, until load()
        self._listeners: Listeners[[EngineStatus]] = Listeners("engine status")
        self._undo = [
            scheduler.add_listener(self._on_change),
            scheduler.add_unload_listener(self._on_unload),
        ]

    def detach(self) -> None:
        """Stop listening to the scheduler (the runtime closing)."""
        for undo in self._undo:
            undo()
        self._undo = []

    # ---- what the default model is ------------------------------------------------------

    @property
    def spec(self) -> ModelSpec | None:
        """The default model (None before the first :meth:`load`)."""
        with self._lock:
            return self._spec

    def load(self, spec: ModelSpec, device: str | None = None) -> None:
        """Make ``spec`` the default model and load it (returns at once; a thread places
        it, waiting for room like a request would). Other loaded models stay."""
        with self._changed:
            former = self._spec
            self._spec, self._gone, self._placing, self._why = spec, None, True, None
            self._changed.notify_all()
        self._scheduler.prefer(spec.id)
        if former is not None:
            self._scheduler.release_hold(former.id)
        self._scheduler.release_hold(spec.id)  # requests held by expect_load() may go on
        self._emit(self.status())
        threading.Thread(
            target=self._place, args=(spec, device), name="engine-place", daemon=True
        ).start()

    def expect_load(self, spec: ModelSpec, device: str, why: str) -> None:
        """Name ``spec`` the default model before :meth:`load` is called (it shows as
        ``loading``, with ``why``).

        For start-up work that must come first (the CPU self-tune): the scheduler holds
        requests naming ``spec`` meanwhile, so they wait for the load or get 503 +
        Retry-After, never 404. ``device`` is where :meth:`load` will place it.
        """
        with self._changed:
            self._spec, self._gone, self._placing, self._why = spec, None, True, why
            self._changed.notify_all()
        self._scheduler.prefer(spec.id)
        self._scheduler.hold(spec.id, why)
        logger.info("%s on %s: %s", spec.id, device, why)
        self._emit(self.status())

    def _place(self, spec: ModelSpec, device: str | None) -> None:
        """Thread ``engine-place``: load ``spec`` where asked (moving it when it runs
        elsewhere), noting why when it cannot be placed."""
        client = self._scheduler.client(spec.id)
        current = client.status().device if client is not None else None
        moved = current is not None and device is not None and current != device
        if moved and not self._scheduler.unload(spec.id, f"moving to {device}"):
            logger.warning("%s has requests in flight: it stays where it is", spec.id)
        try:
            # One try: unloaded by hand while it loads, it stays unloaded (the user's word).
            wait = max(self._settings.load_wait_seconds, PLACE_WAIT_SECONDS)
            self._scheduler.acquire(spec, device, wait, tries=1)
        except (NoRoom, EngineUnavailable) as exc:
            logger.error("could not load %s: %s", spec.id, exc)
            with self._lock:
                # An unload meanwhile already said why it has no worker: that stays.
                if self._spec == spec and self._gone is None:
                    self._gone = _Gone("not_loaded", str(exc))
        finally:
            with self._changed:
                if self._spec == spec:
                    self._placing = False
                self._changed.notify_all()
            self._emit(self.status())

    # ---- its state -----------------------------------------------------------------------

    def status(self) -> EngineStatus:
        """The default model's status (its worker's), or what stands in for it."""
        with self._lock:
            spec, gone, placing, why = self._spec, self._gone, self._placing, self._why
        client = self._client(spec)
        if client is not None:
            return client.status()
        if placing and spec is not None:
            return EngineStatus(state=LOADING, model=spec, message=why or f"loading {spec.id}")
        if not self._scheduler.started:
            return EngineStatus(state=STOPPED)
        if gone is not None and spec is not None:
            # What its last worker went through (restarts, last error) outlives the worker.
            history = self._scheduler.history(spec.id) or CrashHistory()
            if gone.how == "not_loaded":  # never loaded: not healthy, unlike an unload
                message = f"could not load {spec.id}: {gone.reason}"
                status = EngineStatus(state=ERROR, model=spec, message=message)
            else:
                message = f"{spec.id} was unloaded ({gone.reason})"
                status = EngineStatus(state=IDLE, message=message, unloaded=gone.reason)
            return replace(status, restarts=history.restarts, last_error=history.last_error)
        return EngineStatus(state=IDLE)

    def add_listener(self, listener: Callable[[EngineStatus], None]) -> Callable[[], None]:
        """Call ``listener`` with the default model's status on its changes (on whichever
        thread made them; it must not block). Returns an undo."""
        return self._listeners.add(listener)

    def wait_for(self, states: Collection[EngineState], timeout: float) -> EngineStatus:
        """Block until the default model's state is one of ``states`` (CLI and tests)."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.status()
            left = deadline - time.monotonic()
            if status.state in states or left <= 0:
                return status
            with self._changed:
                self._changed.wait(min(_POLL_SECONDS, left))

    def expires_at(self) -> datetime | None:
        """When the default model unloads if idle (None: not loaded, or never)."""
        client = self._client(self.spec)
        return client.expires_at() if client is not None else None

    def set_keep_alive(self, seconds: float) -> None:
        """The default model's keep-alive (see :meth:`EngineClient.set_keep_alive`)."""
        client = self._client(self.spec)
        if client is not None:
            client.set_keep_alive(seconds)

    def release(self, reason: str = "unloaded") -> bool:
        """Unload the default model now; False while it has a request in flight."""
        spec = self.spec
        if spec is None or self._client(spec) is None:
            return True
        return self._scheduler.unload(spec.id, reason)

    def revive(self) -> bool:
        """Start the default model's worker again after repeated crashes (see
        :meth:`EngineClient.revive`)."""
        client = self._client(self.spec)
        return client.revive() if client is not None else False

    # ---- inside --------------------------------------------------------------------------

    def _client(self, spec: ModelSpec | None) -> EngineClient | None:
        return self._scheduler.client(spec.id) if spec is not None else None

    def _on_change(self, key: str | None, status: EngineStatus | None) -> None:
        """The scheduler's change event (see :data:`SchedulerListener`)."""
        if key is None:
            self._emit(self.status())  # no lock held: look again
            return
        spec = self.spec
        if status is not None and spec is not None and key == model_key(spec.id):
            self._emit(status)  # under that client's lock: pass on what it said

    def _on_unload(self, event: UnloadEvent) -> None:
        """A model went away (perhaps under the scheduler's lock: only this lock here)."""
        with self._changed:
            if self._spec is not None and model_key(event.model_id) == model_key(self._spec.id):
                self._gone = _Gone("unloaded", event.message)
            self._changed.notify_all()

    def _emit(self, status: EngineStatus) -> None:
        with self._changed:
            self._changed.notify_all()
        self._listeners.emit(status)
