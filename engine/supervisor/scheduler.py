"""The scheduler: one engine worker per loaded model, side by side within a memory budget.

A request names its model; :meth:`Scheduler.acquire` gives the :class:`EngineClient` of
that model, starting a worker for it when it is not loaded. Every model (chat, embedding
or reranker) lives in a worker process of its own (docs/architecture.md, "Several
models"): a crash, hang or long GIL-holding step of one model never touches another's
requests, and unloading a model is ending its worker, which returns all of its memory.

Models stay loaded while their costs fit :func:`engine.supervisor.budget.budget_mb`. A new
model that does not fit evicts the least recently used models that have no request in
flight; when the ones it would need are busy, it waits for them (bounded by
``Settings.load_wait_seconds``), then raises :class:`NoRoom` (a 503 with Retry-After). A
running request is never cancelled to make room: eviction goes through
:meth:`EngineClient.close_if_idle`, atomic with the client's own submit.

Each client keeps its own lifecycle (keep_alive, ttl, idle unload, crash restarts); a chat
model whose client unloaded it for being idle leaves the scheduler (its spare worker ends),
except the default model, whose spare worker stays as a lone client's did.

The scheduler also shows a *default model* (the one the CLI loaded or the tray picked):
:meth:`status`, :meth:`submit`, :meth:`expires_at`, ... speak of it, so the desktop and
``/health``'s top-level fields keep their one-model view.

Threading: public methods are safe on any thread; :meth:`acquire`, :meth:`unload`,
:meth:`close` and :meth:`wait_for` block (call them off the event loop); the reading
hand-over methods run on the loop concerned, as on :class:`EngineClient`. Lock order:
the scheduler's lock, then a client's; status listeners (called under a client's lock)
never take the scheduler's lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

from engine.models import ModelSpec
from engine.settings import Settings
from engine.supervisor import budget
from engine.supervisor.client import EngineClient
from engine.supervisor.pressure import PressureWatch
from engine.supervisor.states import (
    ERROR,
    IDLE,
    LOADING,
    READY,
    RESTARTING,
    STARTING,
    STOPPED,
    EngineState,
    EngineStatus,
    EngineUnavailable,
    LoadedModel,
    NoRoom,
)
from engine.supervisor.streams import RequestStream
from engine.supervisor.unloads import UnloadEvent, UnloadLog, UnloadReason
from engine.worker.messages import Embedded, GenerationRequest, Reranked

__all__ = [  # with the states a caller of the default view waits for
    "ERROR",
    "READY",
    "Engine",
    "LoadedModel",
    "NoRoom",
    "Scheduler",
    "model_key",
]

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5
PLACE_WAIT_SECONDS = 600.0  # the least a default model's load waits for room and its load
_Answer = TypeVar("_Answer", Embedded, Reranked)  # what a one-shot request ends with
_POLL_SECONDS = 0.1  # how often a waiting load looks again at the busy models


def model_key(model_id: str) -> str:
    """The key a model is held under: ids ignore case and surrounding spaces."""
    return model_id.strip().lower()


@dataclass(frozen=True)
class _DefaultGone:
    """Why the default model has no worker: ``unloaded`` when it was placed then went (idle,
    evicted, unloaded by hand), ``not_loaded`` when it could never be placed (no room beside
    busy models, the engine closing); ``reason`` says it in words. The default view shows
    the first as a healthy ``idle`` ("<id> was unloaded (<reason>)") and the second as
    ``error`` ("could not load <id>: <reason>"), as a worker reports its own failed load."""

    how: Literal["unloaded", "not_loaded"]
    reason: str


@dataclass
class _Slot:
    """One loaded (or loading) model and its worker's client (scheduler lock)."""

    spec: ModelSpec
    client: EngineClient
    device: str
    estimate_mb: int
    last_used: float = field(default_factory=time.monotonic)
    started: bool = False  # its worker runs (set by _start_client, under the lock)

    def cost_mb(self) -> tuple[int, bool]:
        """What this model holds now (MB) and whether that is only the estimate.

        A chat model costs its worker's measured memory once loaded. An encoder loads in
        its worker on first use, so it costs at least its estimate until measured above it.
        """
        status = self.client.status()
        measured = budget.measured_mb(status.worker_pid)
        if measured is None:
            return self.estimate_mb, True
        if self.spec.task == "chat":
            if status.state == READY or (status.model is None and status.state == IDLE):
                return measured, False  # loaded, or a spare worker holding no model
            return max(measured, self.estimate_mb), True
        return max(measured, self.estimate_mb), measured < self.estimate_mb

    def busy(self) -> bool:
        """Requests in flight, or a load under way (someone waits for it)."""
        status = self.client.status()
        return status.active_requests > 0 or status.state in (LOADING, STARTING, RESTARTING)


class Scheduler:
    """Holds one :class:`EngineClient` per loaded model within the memory budget.

    Args:
        settings: the app's settings (budget, waits, each worker's own settings).
        backend: passed to every client ("auto", "batched", "serial").
        client_factory: builds a client (tests of the scheduler's own logic only).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        backend: str = "auto",
        client_factory: Callable[[Settings], EngineClient] | None = None,
    ) -> None:
        self._settings = settings
        self._backend = backend
        self._factory = client_factory or (lambda s: EngineClient(s, backend=backend))
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._slots: dict[str, _Slot] = {}
        self._default: str | None = None  # key of the default model
        self._default_spec: ModelSpec | None = None
        self._default_gone: _DefaultGone | None = None  # why the default model has no worker
        self._estimates: dict[tuple[Path, str], int] = {}  # _estimate()'s memo
        self._pending: set[str] = set()  # keys being placed by load() on a thread
        self._expect_why: str | None = None  # expect_load()'s reason, until load()
        self._waiting: dict[str, int] = {}  # model id -> requests waiting for room
        self._listeners: list[Callable[[EngineStatus], None]] = []
        self._unloads = UnloadLog()  # why models went away (the tray, /health)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._closing = False
        # One idle worker, so embed()/rerank() through the default view and "no model"
        # status keep their meaning before any model loads (the desktop's first start).
        self._idle_client: EngineClient | None = None
        # Embedding and rerank workers have no chat model for a client's idle timer to
        # watch: this thread ends them once unused for Settings.idle_unload_seconds.
        self._janitor: threading.Thread | None = None
        self._pressure: PressureWatch | None = None

    # ---- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Ready to load models (no worker starts until a model is asked for)."""
        with self._lock:
            self._started = True
            self._closing = False
            if self._janitor is None or not self._janitor.is_alive():
                self._janitor = threading.Thread(
                    target=self._idle_encoders, name="engine-encoders-idle", daemon=True
                )
                self._janitor.start()
            if self._pressure is None:  # memory pressure, battery: see pressure.py
                self._pressure = PressureWatch(self, self._settings)
                self._pressure.start()

    def close(self, timeout: float = 10.0) -> None:
        """End every worker; in-flight requests end with an error."""
        with self._lock:
            self._closing = True
            pressure, self._pressure = self._pressure, None
            clients = [slot.client for slot in self._slots.values()]
            self._slots.clear()
            self._changed.notify_all()
        if pressure is not None:
            pressure.stop()
        for client in clients:
            client.close(timeout)
        with self._lock:
            self._started = False
        self._notify()

    def read_on_loop(self) -> None:
        """Read every worker's events on the running loop (call on that loop), new ones too."""
        loop = asyncio.get_running_loop()
        with self._lock:
            self._loop = loop
            clients = [slot.client for slot in self._slots.values()]
        for client in clients:
            client.read_on_loop()

    def read_on_thread(self) -> None:
        """Give every worker's reading back to threads (call on the reading loop)."""
        with self._lock:
            self._loop = None
            clients = [slot.client for slot in self._slots.values()]
        for client in clients:
            client.read_on_thread()

    # ---- models ------------------------------------------------------------------------

    def acquire(self, spec: ModelSpec, device: str | None, timeout: float | None = None) -> Any:
        """The client serving ``spec``, loading it in a new worker when needed (blocks).

        Waits up to ``timeout`` (default ``Settings.load_wait_seconds``) in all: for busy
        models to go idle when ``spec`` needs their room, then for the load. Returns the
        client whatever its state then (``ready``, ``error``, still ``loading``): the
        caller says which. Typed ``Any`` for :class:`EngineLike` callers (it is an
        :class:`EngineClient`). A worker closed while the request waited for its load
        (the model unloaded meanwhile) is looked up again once, which loads the model
        again: a request never fails for another's unload or eviction.

        Raises:
            NoRoom: ``spec`` does not fit beside models whose requests stayed in flight.
            EngineUnavailable: the scheduler is closing, or ``spec`` was unloaded again
                while it loaded again (``stopped``, retry shortly).
        """
        return self._acquire(spec, device, timeout, tries=2)

    def _acquire(
        self, spec: ModelSpec, device: str | None, timeout: float | None, tries: int
    ) -> EngineClient:
        """:meth:`acquire`, looking ``spec`` up at most ``tries`` times when its worker is
        closed while the request waits for its load (blocks)."""
        wait = self._settings.load_wait_seconds if timeout is None else timeout
        deadline = time.monotonic() + wait
        device = device or self._settings.device
        estimate = self._estimate(spec)  # reads files once per model: before the lock
        budget.device_info(device)  # a GPU's memory, read once (OpenVINO): before the lock
        key = model_key(spec.id)
        states: set[EngineState] = {READY, ERROR} if spec.task == "chat" else {IDLE, READY, ERROR}
        for _ in range(tries):
            slot, victims, new = self._reserve(spec, device, estimate, deadline)
            for victim in victims:  # outside the lock: a worker takes a moment to exit
                logger.info("evicting %s to make room for %s", victim.spec.id, spec.id)
                victim.client.close()
                self._unloads.record(victim.spec.id, "evicted", f"evicted for {spec.id}")
            if new:
                # Taken meanwhile (unloaded, closing): _wait_served sees it left, and the
                # next look-up loads it again or says the scheduler is closing.
                with contextlib.suppress(EngineUnavailable):
                    self._start_client(key, slot, device)
            self._notify()
            if self._wait_served(key, slot, states, deadline):
                return slot.client
            logger.info("%s was unloaded while a request waited for its load", spec.id)
        raise EngineUnavailable(f"{spec.id} was unloaded while it loaded; retry", STOPPED, 1)

    def _wait_served(
        self, key: str, slot: _Slot, states: Collection[EngineState], deadline: float
    ) -> bool:
        """Wait (blocks, no lock held on entry) until ``slot``'s client is in one of
        ``states`` or ``deadline`` passes: True, the caller reads its state. False when
        the slot left the scheduler meanwhile (unloaded, or the scheduler closing): its
        client ends ``stopped``, which a wait for ``states`` alone would sit out to the
        deadline. A slot another request is still starting (its worker not spawned, so
        ``stopped`` too) is waited for first."""
        with self._changed:
            while not slot.started and self._slots.get(key) is slot:
                left = deadline - time.monotonic()
                if left <= 0:
                    return True
                self._changed.wait(min(_POLL_SECONDS, left))
        # Once started, a client is stopped only by close(), after its slot was taken.
        status = slot.client.wait_for({*states, STOPPED}, max(0.0, deadline - time.monotonic()))
        return status.state != STOPPED

    def _estimate(self, spec: ModelSpec) -> int:
        """:func:`budget.estimated_mb` of ``spec``, read from disk once per model folder:
        every embed/rerank request passes through :meth:`acquire`, and a model's files do
        not change while it is served (any thread; a dict write is atomic)."""
        key = (spec.path, spec.task)
        estimate = self._estimates.get(key)
        if estimate is None:
            estimate = self._estimates[key] = budget.estimated_mb(spec, self._settings)
        return estimate

    def _reserve(
        self, spec: ModelSpec, device: str, estimate: int, deadline: float
    ) -> tuple[_Slot, list[_Slot], bool]:
        """The slot of ``spec`` (an existing one, or a new one reserved with the idle models
        it evicts), waiting for busy models until ``deadline``; returns (slot, victims to
        close, whether it is new)."""
        key = model_key(spec.id)
        with self._changed:
            while True:
                if self._closing:
                    raise EngineUnavailable("the engine is shutting down", STOPPED, None)
                slot = self._slots.get(key)
                if slot is None and key == self._default and self._expect_why is not None:
                    # Start-up work (the CPU self-tune) comes before this model's load: wait
                    # for load() rather than load it now with untuned properties.
                    message = f"{spec.id} loads once this is done: {self._expect_why}"
                    self._wait_until(
                        deadline, EngineUnavailable(message, LOADING, RETRY_AFTER_SECONDS)
                    )
                    continue
                reload = False
                if slot is not None:
                    slot.last_used = time.monotonic()
                    if spec.task == "chat":
                        status = slot.client.status()
                        # Unloaded (idle, keep_alive) with its spare worker kept, or failed:
                        # it loads again, so it needs its room again like a new model.
                        # A slot whose worker is not started yet is being placed by another
                        # request: wait for that load (below), never load it a second time.
                        reload = slot.started and (status.state == ERROR or status.model is None)
                    if not reload:
                        return slot, [], False
                victims = self._plan(key, estimate, device)
                if victims is not None:
                    self._take(victims, f"evicted for {spec.id}")
                    if slot is not None:
                        # Under the lock, so _drop_unloaded cannot end the worker meanwhile.
                        slot.client.load(spec, device)
                        return slot, victims, False
                    slot = _Slot(spec, self._factory(self._settings), device, estimate)
                    self._slots[key] = slot
                    return slot, victims, True
                left = deadline - time.monotonic()
                if left <= 0:
                    raise NoRoom(self._no_room_message(spec, estimate), RETRY_AFTER_SECONDS)
                self._waiting[spec.id] = self._waiting.get(spec.id, 0) + 1
                try:
                    self._changed.wait(min(_POLL_SECONDS, left))
                finally:
                    self._waiting[spec.id] -= 1
                    if not self._waiting[spec.id]:
                        del self._waiting[spec.id]

    def _take(self, victims: list[_Slot], why: str) -> None:
        """Remove the slots of the models :meth:`_plan` evicts (lock held)."""
        for victim in victims:
            gone = model_key(victim.spec.id)
            self._slots.pop(gone, None)
            if gone == self._default:
                self._default_gone = _DefaultGone("unloaded", why)

    def _wait_until(self, deadline: float, timed_out: Exception) -> None:
        """Wait (holding ``_changed``) for a change, at most until ``deadline``; past it,
        raise ``timed_out``."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise timed_out
        self._changed.wait(min(_POLL_SECONDS, left))

    def running(self, model_id: str) -> EngineClient | None:
        """The client of ``model_id`` when it is loaded and takes requests (never blocks)."""
        with self._lock:
            slot = self._slots.get(model_key(model_id))
            if slot is None:
                return None
            if slot.spec.task == "chat" and slot.client.status().state != READY:
                return None
            slot.last_used = time.monotonic()
            return slot.client

    def loaded(self) -> list[LoadedModel]:
        """Every model held by a worker, default first, then by id."""
        with self._lock:
            slots = list(self._slots.items())
            default = self._default
        models = []
        for key, slot in slots:
            status = slot.client.status()
            state = status.state
            if slot.spec.task == "chat" and status.model is None:
                continue  # the default model's spare worker after an unload: no model
            if slot.spec.task != "chat" and state == IDLE:
                state = READY  # an encoder's worker takes requests with no chat model
            memory, estimated = slot.cost_mb()
            models.append(
                LoadedModel(
                    id=slot.spec.id,
                    task=slot.spec.task,
                    state=state,
                    device=status.device or slot.device,
                    memory_mb=memory,
                    memory_estimated=estimated,
                    context_length=status.context_length,
                    expires_at=self._expires_at(slot, status),
                    active_requests=status.active_requests,
                    worker_pid=status.worker_pid,
                    default=key == default,
                )
            )
        return sorted(models, key=lambda m: (not m.default, m.id.lower()))

    def _expires_at(self, slot: _Slot, status: EngineStatus) -> datetime | None:
        """When ``slot``'s model unloads for being idle (None: never, or not loaded). A chat
        model's own client times it (keep_alive); an encoder's is :meth:`_idle_encoders`,
        counting from its last use (from now while it is busy)."""
        if slot.spec.task == "chat":
            return slot.client.expires_at() if status.state == READY else None
        seconds = self._settings.idle_unload_seconds
        if seconds < 0:
            return None
        left = seconds if slot.busy() else slot.last_used + seconds - time.monotonic()
        return datetime.now(UTC) + timedelta(seconds=max(left, 0.0))

    def unload(
        self,
        model_id: str | None = None,
        reason: str = "unloaded",
        cause: UnloadReason = "requested",
    ) -> bool:
        """Unload ``model_id`` (default: the default model) now by ending its worker; False
        while it has a request in flight (nothing is cancelled) or when it is not loaded.
        ``reason`` says why in words, ``cause`` in the typed :data:`UnloadReason` the
        unload event carries (:meth:`recent_unloads`). Blocks while the worker exits (the
        tray calls it off the GUI thread)."""
        with self._lock:
            key = model_key(model_id) if model_id is not None else self._default
            if key is None:
                return False
            slot = self._slots.get(key)
            if slot is None or not slot.client.close_if_idle():
                return False
            del self._slots[key]
            if key == self._default:
                self._default_gone = _DefaultGone("unloaded", reason)
            self._changed.notify_all()
        logger.info("unloading %s (%s)", slot.spec.id, reason)
        slot.client.close()
        self._unloads.record(slot.spec.id, cause, reason)
        self._notify()
        return True

    def recent_unloads(self) -> list[UnloadEvent]:
        """The models that went away lately and why, oldest first (``/health``)."""
        return self._unloads.recent()

    def add_unload_listener(self, listener: Callable[[UnloadEvent], None]) -> Callable[[], None]:
        """Call ``listener`` each time a model goes away (idle, keep_alive 0, evicted, memory
        pressure, battery, unloaded by hand, crashed), on the thread that saw it; it must
        not block. Returns an undo."""
        return self._unloads.add_listener(listener)

    def active_requests(self) -> int:
        """Requests in flight over every model (cheap: the tray polls it)."""
        with self._lock:
            clients = [slot.client for slot in self._slots.values()]
        return sum(client.status().active_requests for client in clients)

    def idle_models(self) -> list[tuple[str, float]]:
        """The loaded models with no request in flight and no load under way, as (id,
        seconds idle), the ones to unload first first: other models before the default one,
        least recently used first (:mod:`engine.supervisor.pressure` picks from these). A
        busy model's idle time restarts (it counts from the end of its requests, as the
        encoders' janitor counts it)."""
        now = time.monotonic()
        idle: list[tuple[bool, float, str]] = []
        with self._lock:
            for key, slot in self._slots.items():
                if slot.busy():
                    slot.last_used = now
                elif slot.spec.task != "chat" or slot.client.status().model is not None:
                    idle.append((key == self._default, slot.last_used, slot.spec.id))
        return [(model_id, now - used) for _, used, model_id in sorted(idle)]

    def loading(self) -> list[str]:
        """Chat models whose worker is starting or loading them, by id (cheap: the tray
        polls it to say "Loading <model>…" for any model, not only the default one; an
        embedding model loads inside its first request)."""
        with self._lock:
            slots = [slot for slot in self._slots.values() if slot.spec.task == "chat"]
        statuses = [(slot.spec.id, slot.client.status()) for slot in slots]
        loading = (LOADING, STARTING, RESTARTING)
        return sorted(i for i, status in statuses if status.model and status.state in loading)

    def waiting(self) -> list[str]:
        """Models with requests waiting for busy models to leave them room."""
        with self._lock:
            return sorted(self._waiting)

    def budget_mb(self) -> int:
        """The memory budget the models share (MB)."""
        return budget.budget_mb(self._settings)

    # ---- the default model's view (the CLI, the desktop, /health) -----------------------

    def load(self, spec: ModelSpec, device: str | None = None) -> None:
        """Make ``spec`` the default model and load it (returns at once; a thread places
        it, waiting for room like a request would). Other loaded models stay."""
        key = model_key(spec.id)
        with self._lock:
            former = self._default
            self._default, self._default_spec, self._default_gone = key, spec, None
            self._pending.add(key)
            self._expect_why = None
            self._changed.notify_all()  # requests held by expect_load() may go on
        self._notify()
        threading.Thread(
            target=self._place, args=(key, spec, device, former), name="engine-place", daemon=True
        ).start()

    def expect_load(self, spec: ModelSpec, device: str, why: str) -> None:
        """Name ``spec`` the default model before :meth:`load` is called (it shows as
        ``loading``, with ``why``).

        For start-up work that must come first (the CPU self-tune): the resolver finds
        ``spec`` in the status, so a request naming it meanwhile loads it or waits, never
        404. ``device`` is where :meth:`load` will place it.
        """
        key = model_key(spec.id)
        with self._lock:
            self._default, self._default_spec, self._default_gone = key, spec, None
            self._pending.add(key)
            self._expect_why = why
        logger.info("%s on %s: %s", spec.id, device, why)
        self._notify()

    def _place(self, key: str, spec: ModelSpec, device: str | None, former: str | None) -> None:
        if former is not None and former != key:
            self._drop_spare(former)  # kept only while its model was the default
        with self._lock:
            slot = self._slots.get(key)
            moved = slot is not None and device is not None and slot.device != device
        if moved and not self.unload(key, f"moving to {device}"):
            logger.warning("%s has requests in flight: it stays where it is", spec.id)
        wait = max(self._settings.load_wait_seconds, PLACE_WAIT_SECONDS)
        try:
            # One try: unloaded by hand while it loads, it stays unloaded (the user's word).
            self._acquire(spec, device, wait, tries=1)
        except (NoRoom, EngineUnavailable) as exc:
            logger.error("could not load %s: %s", spec.id, exc)
            with self._lock:
                # An unload meanwhile already said why it has no worker: that stays.
                if self._default == key and self._default_gone is None:
                    self._default_gone = _DefaultGone("not_loaded", str(exc))
        finally:
            with self._lock:
                self._pending.discard(key)
                self._changed.notify_all()
            self._notify()

    def status(self) -> EngineStatus:
        """The default model's status (its worker's), or what stands in for it."""
        with self._lock:
            slot = self._slots.get(self._default) if self._default else None
            pending = self._default is not None and self._default in self._pending
            spec, gone, started = self._default_spec, self._default_gone, self._started
        if slot is not None:
            return slot.client.status()
        if pending and spec is not None:
            why = self._expect_why or f"loading {spec.id}"
            return EngineStatus(state=LOADING, model=spec, message=why)
        if not started:
            return EngineStatus(state=STOPPED)
        if gone is not None and spec is not None:
            if gone.how == "not_loaded":  # never loaded: not healthy, unlike an unload
                message = f"could not load {spec.id}: {gone.reason}"
                return EngineStatus(state=ERROR, model=spec, message=message)
            message = f"{spec.id} was unloaded ({gone.reason})"
            return EngineStatus(state=IDLE, message=message, unloaded=gone.reason)
        return EngineStatus(state=IDLE)

    def add_listener(self, listener: Callable[[EngineStatus], None]) -> Callable[[], None]:
        """Call ``listener`` with the default view's status on its changes (on whichever
        thread made them; it must not block)."""
        with self._lock:
            self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def wait_for(self, states: Collection[EngineState], timeout: float) -> EngineStatus:
        """Block until the default view's state is one of ``states`` (CLI and tests)."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.status()
            left = deadline - time.monotonic()
            if status.state in states or left <= 0:
                return status
            with self._changed:
                self._changed.wait(min(_POLL_SECONDS, left))

    def submit(self, request: GenerationRequest) -> RequestStream:
        """Queue a generation on the default model (the pipeline asks for a model's own
        client instead: see :meth:`acquire`)."""
        return self._default_client().submit(request)

    def set_keep_alive(self, seconds: float) -> None:
        """The default model's keep-alive (see :meth:`EngineClient.set_keep_alive`)."""
        with contextlib.suppress(EngineUnavailable):
            self._default_client().set_keep_alive(seconds)

    def expires_at(self) -> datetime | None:
        """When the default model unloads if idle (None: not loaded, or never)."""
        try:
            return self._default_client().expires_at()
        except EngineUnavailable:
            return None

    def release(self, reason: str = "unloaded") -> bool:
        """Unload the default model now; False while it has a request in flight."""
        with self._lock:
            key = self._default
            present = key is not None and key in self._slots
        if key is None or not present:
            return True
        return self.unload(key, reason)

    def revive(self) -> bool:
        """Start the default model's worker again after repeated crashes (see
        :meth:`EngineClient.revive`)."""
        try:
            return self._default_client().revive()
        except EngineUnavailable:
            return False

    def cpu_properties(self) -> dict[str, Any]:
        """CPU properties a load uses (see :meth:`EngineClient.cpu_properties`)."""
        return self._spare().cpu_properties()

    def tune_cpu(self, model_dir: Path | None = None) -> None:
        """Run the CPU self-tune (see :meth:`EngineClient.tune_cpu`; blocks seconds)."""
        self._spare().tune_cpu(model_dir)

    async def embed(
        self, spec: ModelSpec, texts: list[str], device: str | None = None, truncate: bool = False
    ) -> Embedded:
        """Embed ``texts`` with ``spec`` in its own worker (loaded on demand).

        Raises:
            NoRoom: no room for it beside busy models within the wait.
            EngineUnavailable, RequestFailed: as :meth:`EngineClient.embed`.
        """
        return await self._on_worker(
            spec, device, lambda client: client.embed(spec, texts, device, truncate)
        )

    async def rerank(
        self, spec: ModelSpec, query: str, documents: list[str], device: str | None = None
    ) -> Reranked:
        """Score ``documents`` against ``query`` with the reranker ``spec`` in its own
        worker (see :meth:`embed`)."""
        return await self._on_worker(
            spec, device, lambda client: client.rerank(spec, query, documents, device)
        )

    async def _on_worker(
        self,
        spec: ModelSpec,
        device: str | None,
        run: Callable[[EngineClient], Awaitable[_Answer]],
    ) -> _Answer:
        """``run`` a one-shot request (embed, rerank) on ``spec``'s worker, loaded on
        demand. A worker found closing after :meth:`acquire` gave it (the model was evicted
        for another one, or unloaded, in between) is looked up again once, which loads it:
        a request never fails for another model's eviction."""
        client = await asyncio.to_thread(self.acquire, spec, device)
        try:
            return await run(client)
        except EngineUnavailable as exc:
            if exc.state != STOPPED:
                raise
        client = await asyncio.to_thread(self.acquire, spec, device)
        return await run(client)

    # ---- inside --------------------------------------------------------------------------

    def _idle_encoders(self) -> None:
        """Thread: unload embedding/rerank models unused for ``idle_unload_seconds``."""
        seconds = self._settings.idle_unload_seconds
        if seconds < 0:
            return  # never unload for being idle
        while True:
            with self._changed:
                if self._closing:
                    return
                now = time.monotonic()
                due = []
                for key, slot in self._slots.items():
                    if slot.spec.task == "chat":
                        continue  # its client's own idle timer (and keep_alive) handles it
                    if slot.busy():
                        slot.last_used = now  # idle counts from the end of its requests
                    elif now - slot.last_used >= seconds:
                        due.append(key)
                if not due:
                    self._changed.wait(min(max(seconds / 4, 0.2), 30.0))
                    continue
            for key in due:
                self.unload(key, "idle", "idle")

    def _plan(self, key: str, need_mb: int, device: str) -> list[_Slot] | None:
        """The idle models to evict so ``need_mb`` fits (LRU first) on ``device`` (a GPU's
        own memory caps the budget), or None when it cannot fit until busy models finish
        (lock held). Nothing loaded: it always fits, even past the budget, or nothing could
        ever be served."""
        limit = budget.budget_mb(self._settings, budget.device_info(device))
        slots = [slot for k, slot in self._slots.items() if k != key]
        costs = {id(slot): slot.cost_mb()[0] for slot in slots}
        used = sum(costs.values())
        victims: list[_Slot] = []
        for slot in sorted(slots, key=lambda s: s.last_used):
            if used + need_mb <= limit:
                break
            if not slot.busy():
                victims.append(slot)
                used -= costs[id(slot)]
        if used + need_mb > limit and len(victims) < len(slots):
            return None  # it fits once busy models finish: wait (they serve on)
        taken: list[_Slot] = []
        for victim in victims:  # atomic with their submit: a request may have just come
            if not victim.client.close_if_idle():
                for slot in taken:
                    slot.client.reopen()
                return None
            taken.append(victim)
        return victims

    def _no_room_message(self, spec: ModelSpec, need_mb: int) -> str:
        busy = [s.spec.id for s in self._slots.values() if s.busy()]
        return (
            f"{spec.id} needs about {need_mb} MB and the memory budget "
            f"({budget.budget_mb(self._settings)} MB) is held by models with requests in "
            f"flight ({', '.join(busy) or 'none'}); they are never cancelled to make room. "
            f"Retry shortly, or raise memory_budget_mb"
        )

    def _start_client(self, key: str, slot: _Slot, device: str) -> None:
        """Start the worker of a slot :meth:`_reserve` made (and load its chat model).

        The worker starts under the lock, and only while the slot is still held:
        :meth:`close` or :meth:`unload` may have taken it while the evicted models were
        closing, and a worker started after that would run on with nobody to end it.

        Raises:
            EngineUnavailable: the slot was closed or unloaded meanwhile.
        """
        spec, client = slot.spec, slot.client
        if spec.task == "chat" and device.startswith("CPU"):
            # Before the lock: the first CPU load asks OpenVINO for the CPU's name (the
            # self-tune's key, kept by the client), which must not stall the tray's polls.
            client.cpu_properties()
        with self._lock:
            if self._closing or self._slots.get(key) is not slot:
                message = f"{spec.id} was unloaded while it loaded"
                raise EngineUnavailable(message, STOPPED, 1)
            client.add_listener(lambda status: self._on_client_status(key, spec.id, client, status))
            client.start()
            loop = self._loop
            if loop is not None:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(client.read_on_loop)
            if spec.task == "chat":  # under the lock: no request sees it without a model
                client.load(spec, device)
            slot.started = True

    def _on_client_status(
        self, key: str, model_id: str, client: EngineClient, status: EngineStatus
    ) -> None:
        """A client's status changed (its lock is held: never take the scheduler's)."""
        self._unloads.note_status(client, model_id, status)  # left on its own, or crashed
        if status.unloaded is not None and status.model is None:
            # The client unloaded its model (idle, keep_alive 0) and started a spare
            # worker: the model has left; end that spare worker off this thread.
            threading.Thread(
                target=self._drop_unloaded,
                args=(key, client, status.unloaded),
                name="engine-drop",
                daemon=True,
            ).start()
        if key == self._default:
            for listener in list(self._listeners):
                try:
                    listener(status)
                except Exception:
                    logger.exception("engine status listener failed")

    def _drop_unloaded(self, key: str, client: EngineClient, reason: str) -> None:
        """End the spare worker a client started after unloading its model, unless it is
        the default model's: that one stays, as a lone client's would (``/health`` shows
        it idle and healthy, and the next request loads the model in it)."""
        with self._lock:
            slot = self._slots.get(key)
            if slot is None or slot.client is not client or key == self._default:
                return
            status = client.status()
            if status.model is not None or not client.close_if_idle():
                return  # loaded again meanwhile
            del self._slots[key]
            if key == self._default:
                self._default_gone = _DefaultGone("unloaded", reason)
            self._changed.notify_all()
        client.close()
        self._notify()

    def _drop_spare(self, key: str) -> None:
        """End ``key``'s spare worker (no model) if it has one and is no longer the default:
        :meth:`_drop_unloaded` kept it only because that model was the default."""
        with self._lock:
            slot = self._slots.get(key)
        if slot is not None and slot.spec.task == "chat":
            self._drop_unloaded(key, slot.client, "no longer the default model")

    def _default_client(self) -> EngineClient:
        with self._lock:
            slot = self._slots.get(self._default) if self._default else None
        if slot is None:
            raise EngineUnavailable("no model is loaded", IDLE, None)
        return slot.client

    def _spare(self) -> EngineClient:
        """A client for questions that need no worker (CPU properties, self-tune)."""
        with self._lock:
            if self._idle_client is None:
                self._idle_client = self._factory(self._settings)
            return self._idle_client

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()
        status = self.status()
        for listener in list(self._listeners):
            try:
                listener(status)
            except Exception:
                logger.exception("engine status listener failed")


Engine = EngineClient | Scheduler
"""What the server and the desktop run on: the scheduler, or one client (older tests)."""
