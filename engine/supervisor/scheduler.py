"""The scheduler: one engine worker per loaded model, side by side within a memory budget.

A request names its model; :meth:`Scheduler.acquire` gives the :class:`EngineClient` of
that model, starting a worker for it when it is not loaded. Every model (chat, embedding
or reranker) lives in a worker process of its own (docs/architecture.md, "Several
models"): a crash, hang or long GIL-holding step of one model never touches another's
requests, and unloading a model is ending its worker, which returns all of its memory.
What differs between kinds of model is data (:mod:`engine.supervisor.kinds`), not a path
through this module.

Models stay loaded while their costs fit :func:`engine.supervisor.budget.budget_mb`. A new
model that does not fit evicts the least recently used models that have no request in
flight; when the ones it would need are busy, it waits for them (bounded by
``Settings.load_wait_seconds``), then raises :class:`NoRoom` (a 503 with Retry-After). A
running request is never cancelled to make room: eviction goes through
:meth:`EngineClient.close_if_idle`, atomic with the client's own submit.

The scheduler places models and nothing else. It knows one *preferred* model
(:meth:`prefer`: the default model the CLI loaded or the tray picked), which keeps its
spare worker after an idle unload, goes last under memory pressure and is marked in
:meth:`loaded`; the one-model view the tray and ``/health`` show is built over this public
API by :class:`engine.runtime.DefaultModel`.

One owner for unloads that nobody asked for: the ``engine-scheduler`` thread times every
idle unload (a chat model's keep-alive, which Ollama's ``keep_alive`` and LM Studio's ``ttl``
set, through its client; an encoder's ``idle_unload_seconds``), runs the memory-pressure /
battery checks (:mod:`engine.supervisor.pressure`) and ends the spare worker a model leaves
after its idle unload. Explicit unloads (the tray, LM Studio) and evictions come through
:meth:`unload` and :meth:`acquire` on the caller's thread.

Threading: public methods are safe on any thread; :meth:`acquire`, :meth:`unload` and
:meth:`close` block (call them off the event loop); the reading hand-over methods run on
the loop concerned, as on :class:`EngineClient`. Lock order: the scheduler's lock, then a
client's; listeners called with a client's status (under that client's lock) never take
the scheduler's lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

from engine.listeners import Listeners
from engine.models import ModelSpec
from engine.settings import Settings
from engine.supervisor import budget
from engine.supervisor.client import EngineClient
from engine.supervisor.kinds import ModelKind, kind_of
from engine.supervisor.pressure import PressureWatch
from engine.supervisor.states import (
    ERROR,
    IDLE,
    LOADING,
    READY,
    RESTARTING,
    STARTING,
    STOPPED,
    CrashHistory,
    EngineState,
    EngineStatus,
    EngineUnavailable,
    LoadedModel,
    NoRoom,
)
from engine.supervisor.unloads import UnloadEvent, UnloadLog, UnloadReason
from engine.worker.messages import (
    Embedded,
    Reranked,
    Synthesize,
    Synthesized,
    Transcribe,
    Transcribed,
)

__all__ = ["LoadedModel", "NoRoom", "Scheduler", "SchedulerListener", "model_key"]

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5
_Answer = TypeVar(
    "_Answer", Embedded, Reranked, Transcribed, Synthesized
)  # what a one-shot request ends with
_POLL_SECONDS = 0.1  # how often a waiting load looks again at the busy models

SchedulerListener = Callable[[str | None, EngineStatus | None], None]
"""Called on a change: ``(model key, its client's new status)`` when a model's worker
changed state (under that client's lock: never block, never take the scheduler's lock),
``(None, None)`` when models were placed or removed (no lock held: look again)."""


def _sooner(a: float | None, b: float | None) -> float | None:
    """The shorter of two waits (None: no wait, i.e. forever)."""
    if a is None:
        return b
    return a if b is None else min(a, b)


def model_key(model_id: str) -> str:
    """The key a model is held under: ids ignore case and surrounding spaces."""
    return model_id.strip().lower()


@dataclass
class _Slot:
    """One loaded (or loading) model and its worker's client (scheduler lock)."""

    spec: ModelSpec
    client: EngineClient
    device: str
    estimate_mb: int
    last_used: float = field(default_factory=time.monotonic)
    started: bool = False  # its worker runs (set by _start_client, under the lock)

    @property
    def kind(self) -> ModelKind:
        return kind_of(self.spec.task)

    def cost_mb(self) -> tuple[int, bool]:
        """What this model holds now (MB) and whether that is only the estimate.

        A model its worker loads at start costs the worker's measured memory once loaded.
        One that loads on first use costs at least its estimate until measured above it.
        """
        status = self.client.status()
        measured = budget.measured_mb(status.worker_pid)
        if measured is None:
            return self.estimate_mb, True
        if self.kind.loads_at_start:
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
        self._factory = client_factory or (lambda s: EngineClient(s, backend=backend))
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._slots: dict[str, _Slot] = {}
        self._preferred: str | None = None  # key of the default model (prefer())
        self._holds: dict[str, str] = {}  # key -> why requests for it wait (hold())
        self._estimates: dict[tuple[Path, str], int] = {}  # _estimate()'s memo
        self._waiting: dict[str, int] = {}  # model id -> requests waiting for room
        self._listeners: Listeners[[str | None, EngineStatus | None]] = Listeners("scheduler")
        self._unloads = UnloadLog()  # why models went away (the tray, /health)
        # Restarts and last error of models whose worker left (key -> history): a reload
        # of the same model starts from them, so /health keeps telling a crash loop.
        self._histories: dict[str, CrashHistory] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._closing = False
        # The owner loop (engine-scheduler): woken by _wake; spare workers to end come
        # through _drops, which a client's status listener fills without the lock.
        self._owner: threading.Thread | None = None
        self._wake = threading.Event()
        self._drops: queue.SimpleQueue[tuple[str, EngineClient, str]] = queue.SimpleQueue()
        self._pressure = PressureWatch(self, settings)

    # ---- lifecycle ---------------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether models can be placed (between :meth:`start` and :meth:`close`)."""
        with self._lock:
            return self._started

    def start(self) -> None:
        """Ready to load models (no worker starts until a model is asked for)."""
        with self._lock:
            self._started = True
            self._closing = False
            if self._owner is None or not self._owner.is_alive():
                self._wake.clear()
                self._owner = threading.Thread(
                    target=self._own, name="engine-scheduler", daemon=True
                )
                self._owner.start()
        self._notify()

    def close(self, timeout: float = 10.0) -> None:
        """End every worker; in-flight requests end with an error."""
        with self._lock:
            self._closing = True
            owner, self._owner = self._owner, None
            clients = [slot.client for slot in self._slots.values()]
            self._slots.clear()
            self._changed.notify_all()
        self._wake.set()
        if owner is not None and owner is not threading.current_thread():
            owner.join(timeout)  # an unload under way ends first
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

    def add_listener(self, listener: SchedulerListener) -> Callable[[], None]:
        """Call ``listener`` on every change (see :data:`SchedulerListener`); returns an
        undo."""
        return self._listeners.add(listener)

    # ---- placement policy --------------------------------------------------------------

    def prefer(self, model_id: str | None) -> None:
        """Make ``model_id`` the preferred (default) model: its spare worker stays after an
        idle unload (the next request loads it there), memory pressure unloads it last and
        :meth:`loaded` marks it. The former preferred model's spare worker, kept only for
        that, ends (on the owner loop: never blocks)."""
        key = model_key(model_id) if model_id is not None else None
        with self._lock:
            former, self._preferred = self._preferred, key
            slot = self._slots.get(former) if former is not None and former != key else None
        if slot is not None and slot.kind.loads_at_start:
            self._drops.put((model_key(slot.spec.id), slot.client, "no longer the default model"))
            self._wake.set()

    def hold(self, model_id: str, why: str) -> None:
        """Keep requests for ``model_id`` waiting (up to their deadline, then 503 + Retry-
        After) until :meth:`release_hold`, when it is not loaded: start-up work (the CPU
        self-tune) comes before its load, which must not start with untuned properties."""
        with self._lock:
            self._holds[model_key(model_id)] = why
            self._changed.notify_all()

    def release_hold(self, model_id: str) -> None:
        """Let requests held by :meth:`hold` go on (loading the model if they come first)."""
        with self._lock:
            self._holds.pop(model_key(model_id), None)
            self._changed.notify_all()

    # ---- models ------------------------------------------------------------------------

    def acquire(
        self, spec: ModelSpec, device: str | None, timeout: float | None = None, *, tries: int = 2
    ) -> EngineClient:
        """The client serving ``spec``, loading it in a new worker when needed (blocks).

        Waits up to ``timeout`` (default ``Settings.load_wait_seconds``) in all: for busy
        models to go idle when ``spec`` needs their room, then for the load. Returns the
        client whatever its state then (``ready``, ``error``, still ``loading``): the
        caller says which. A worker closed while the request waited for its load (the model
        unloaded meanwhile) is looked up again, up to ``tries`` times in all, which loads
        the model again: a request never fails for another's unload or eviction.

        Raises:
            NoRoom: ``spec`` does not fit beside models whose requests stayed in flight.
            EngineUnavailable: the scheduler is closing, or ``spec`` was unloaded again
                while it loaded again (``stopped``, retry shortly).
        """
        wait = self._settings.load_wait_seconds if timeout is None else timeout
        deadline = time.monotonic() + wait
        device = device or spec.prefs.device or self._settings.device
        estimate = self._estimate(spec)  # reads files once per model: before the lock
        self._reload_if_changed(spec)
        budget.device_info(device)  # a GPU's memory, read once (OpenVINO): before the lock
        key = model_key(spec.id)
        states = kind_of(spec.task).serving_states
        for _ in range(tries):
            slot, victims, new = self._reserve(spec, device, estimate, deadline)
            for victim in victims:  # outside the lock: a worker takes a moment to exit
                logger.info("evicting %s to make room for %s", victim.spec.id, spec.id)
                victim.client.close()
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

    def _reload_if_changed(self, spec: ModelSpec) -> None:
        """Unload ``spec``'s model when it was loaded with other load settings (context
        length, device, KV-cache precision: changed in the model manager or the API since),
        so this acquire loads it again with the new ones. With a request in flight it stays
        as it is (nothing is cancelled) and the next acquire looks again."""
        with self._lock:
            slot = self._slots.get(model_key(spec.id))
            if slot is None or not slot.started:
                return
            old = slot.spec
        if (old.prefs.load_settings(), old.context_length) == (
            spec.prefs.load_settings(),
            spec.context_length,
        ):
            return
        if self.unload(spec.id, "reloading with its new settings"):
            logger.info("%s reloads with its new load settings", spec.id)

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
        kind = kind_of(spec.task)
        with self._changed:
            while True:
                if self._closing:
                    raise EngineUnavailable("the engine is shutting down", STOPPED, None)
                slot = self._slots.get(key)
                held = self._holds.get(key)
                if slot is None and held is not None:
                    # Start-up work (the CPU self-tune) comes before this model's load: wait
                    # for it rather than load it now with untuned properties.
                    message = f"{spec.id} loads once this is done: {held}"
                    self._wait_until(
                        deadline, EngineUnavailable(message, LOADING, RETRY_AFTER_SECONDS)
                    )
                    continue
                reload = False
                if slot is not None:
                    slot.last_used = time.monotonic()
                    if kind.loads_at_start:
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
                        # Under the lock, so a spare-worker drop cannot end it meanwhile.
                        slot.client.load(spec, device)
                        return slot, victims, False
                    slot = _Slot(spec, self._factory(self._settings), device, estimate)
                    history = self._histories.get(key)
                    if history is not None:
                        slot.client.inherit(history)
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
        """Remove the slots of the models :meth:`_plan` evicts and record why (lock held:
        the event is there before anyone sees the model gone)."""
        for victim in victims:
            self._forget(model_key(victim.spec.id), victim)
            self._unloads.record(victim.spec.id, "evicted", why)

    def _forget(self, key: str, slot: _Slot) -> None:
        """Remove ``slot`` (lock held), keeping its crash history for the model's next
        worker (:meth:`history`)."""
        if self._slots.get(key) is slot:
            del self._slots[key]
        history = slot.client.status().history()
        if history.restarts or history.last_error is not None:
            self._histories[key] = history

    def history(self, model_id: str) -> CrashHistory | None:
        """``model_id``'s crash history: its worker's now, else what its last worker left
        (None: it never crashed). For status views (never blocks)."""
        key = model_key(model_id)
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                return self._histories.get(key)
        history = slot.client.status().history()
        return history if history.restarts or history.last_error is not None else None

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
            if slot.kind.loads_at_start and slot.client.status().state != READY:
                return None
            slot.last_used = time.monotonic()
            return slot.client

    def client(self, model_id: str) -> EngineClient | None:
        """The client holding ``model_id``'s slot, whatever its state (loading, failed, a
        spare worker), or None; for status views (never blocks)."""
        with self._lock:
            slot = self._slots.get(model_key(model_id))
            return slot.client if slot is not None else None

    def loaded(self) -> list[LoadedModel]:
        """Every model held by a worker, the preferred (default) one first, then by id."""
        with self._lock:
            slots = list(self._slots.items())
            preferred = self._preferred
        models = []
        for key, slot in slots:
            status = slot.client.status()
            state = status.state
            if slot.kind.loads_at_start and status.model is None:
                continue  # the default model's spare worker after an unload: no model
            if not slot.kind.loads_at_start and state == IDLE:
                state = READY  # its worker takes requests before the model loads
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
                    default=key == preferred,
                    stalled_seconds=status.stalled_seconds,
                )
            )
        return sorted(models, key=lambda m: (not m.default, m.id.lower()))

    def _expires_at(self, slot: _Slot, status: EngineStatus) -> datetime | None:
        """When ``slot``'s model unloads for being idle (None: never, or not loaded). A
        client-timed model's own client times it (keep_alive); the others' is the owner
        loop, counting from its last use (from now while it is busy)."""
        if slot.kind.idle_timer == "client":
            return slot.client.expires_at() if status.state == READY else None
        seconds = self._settings.idle_unload_seconds
        if seconds < 0:
            return None
        left = seconds if slot.busy() else slot.last_used + seconds - time.monotonic()
        return datetime.now(UTC) + timedelta(seconds=max(left, 0.0))

    def unload(
        self,
        model_id: str,
        reason: str = "unloaded",
        cause: UnloadReason = "requested",
    ) -> bool:
        """Unload ``model_id`` now by ending its worker; False while it has a request in
        flight (nothing is cancelled) or when it is not loaded. ``reason`` says why in
        words, ``cause`` in the typed :data:`UnloadReason` the unload event carries
        (:meth:`recent_unloads`). Blocks while the worker exits (call it off the GUI
        thread and the event loop)."""
        with self._lock:
            key = model_key(model_id)
            slot = self._slots.get(key)
            if slot is None or not slot.client.close_if_idle():
                return False
            self._forget(key, slot)
            self._unloads.record(slot.spec.id, cause, reason)
            self._changed.notify_all()
        logger.info("unloading %s (%s)", slot.spec.id, reason)
        slot.client.close()
        self._notify()
        return True

    def recent_unloads(self) -> list[UnloadEvent]:
        """The models that went away lately and why, oldest first (``/health``)."""
        return self._unloads.recent()

    def add_unload_listener(self, listener: Callable[[UnloadEvent], None]) -> Callable[[], None]:
        """Call ``listener`` each time a model goes away (idle, keep_alive 0, evicted, memory
        pressure, battery, unloaded by hand, crashed), on the thread that saw it (perhaps
        under the scheduler's lock): it must not block nor call back in. Returns an undo."""
        return self._unloads.add_listener(listener)

    def active_requests(self) -> int:
        """Requests in flight over every model (cheap: the tray polls it)."""
        with self._lock:
            clients = [slot.client for slot in self._slots.values()]
        return sum(client.status().active_requests for client in clients)

    def idle_models(self) -> list[tuple[str, float]]:
        """The loaded models with no request in flight and no load under way, as (id,
        seconds idle), the ones to unload first first: other models before the preferred
        one, least recently used first (:mod:`engine.supervisor.pressure` picks from
        these). A busy model's idle time restarts (it counts from the end of its requests,
        as the owner loop counts it for encoders)."""
        now = time.monotonic()
        idle: list[tuple[bool, float, str]] = []
        with self._lock:
            for key, slot in self._slots.items():
                if slot.busy():
                    slot.last_used = now
                elif not slot.kind.loads_at_start or slot.client.status().model is not None:
                    idle.append((key == self._preferred, slot.last_used, slot.spec.id))
        return [(model_id, now - used) for _, used, model_id in sorted(idle)]

    def loading(self) -> list[str]:
        """Models whose worker is starting or loading them, by id (cheap: the tray polls it
        to say "Loading <model>…" for any model; one that loads on first use loads inside
        its first request)."""
        with self._lock:
            slots = [slot for slot in self._slots.values() if slot.kind.loads_at_start]
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

    async def transcribe(
        self, spec: ModelSpec, command: Callable[[int, str], Transcribe], device: str | None = None
    ) -> Transcribed:
        """Transcribe one window with the recogniser ``spec`` in its own worker (see
        :meth:`embed`); ``command`` builds the request for a request id and device."""
        where = device or self._settings.device
        return await self._on_worker(
            spec, device, lambda client: client.transcribe(lambda rid: command(rid, where))
        )

    async def synthesize(
        self, spec: ModelSpec, command: Callable[[int, str], Synthesize], device: str | None = None
    ) -> Synthesized:
        """Speak one piece of text with the text-to-speech model ``spec`` in its own worker
        (see :meth:`embed`); ``command`` builds the request for a request id and device."""
        where = device or self._settings.device
        return await self._on_worker(
            spec, device, lambda client: client.synthesize(lambda rid: command(rid, where))
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

    # ---- the owner loop ----------------------------------------------------------------

    def _own(self) -> None:
        """Thread ``engine-scheduler``: every unload nobody asked for, one at a time.

        Unloads chat models whose keep-alive ran out (each client says when:
        :meth:`EngineClient.idle_due`), ends the spare worker such an unload leaves (unless
        it is the preferred model's), the workers of encoders idle for
        ``idle_unload_seconds``, and runs the memory-pressure / battery check every
        :attr:`PressureWatch.interval`. Clients wake it when their deadline may have moved.
        """
        next_check = time.monotonic() + self._pressure.interval
        while True:
            with self._lock:
                if self._closing:
                    return
            while True:
                try:
                    self._drop_unloaded(*self._drops.get_nowait())
                except queue.Empty:
                    break
            wait = _sooner(self._unload_idle_encoders(), self._unload_kept_too_long())
            if self._pressure.enabled:
                now = time.monotonic()
                if now >= next_check:
                    next_check = now + self._pressure.interval
                    try:
                        self._pressure.check()
                    except Exception:  # the loop must outlive one failed reading
                        logger.exception("memory pressure check failed")
                left = max(0.0, next_check - time.monotonic())
                wait = left if wait is None else min(wait, left)
            self._wake.wait(wait)
            self._wake.clear()

    def _unload_kept_too_long(self) -> float | None:
        """Unload the client-timed models whose keep-alive ran out (through their clients:
        each retires its worker and starts a spare one, which the next round may end);
        returns how long until the next one is due (None: none is)."""
        with self._lock:
            clients = [s.client for s in self._slots.values() if s.kind.idle_timer == "client"]
        now = time.monotonic()
        wait: float | None = None
        for client in clients:
            if client.unload_if_idle_due(now):
                continue
            due = client.idle_due()
            if due is not None:
                wait = _sooner(wait, max(0.0, due - now))
        return wait

    def _unload_idle_encoders(self) -> float | None:
        """Unload the scheduler-timed models unused for ``idle_unload_seconds``; returns how
        long the loop may sleep before looking again (None: no such timer)."""
        seconds = self._settings.idle_unload_seconds
        if seconds < 0:
            return None  # never unload for being idle
        with self._lock:
            now = time.monotonic()
            due = []
            for key, slot in self._slots.items():
                if slot.kind.idle_timer != "scheduler":
                    continue
                if slot.busy():
                    slot.last_used = now  # idle counts from the end of its requests
                elif now - slot.last_used >= seconds:
                    due.append(key)
        for key in due:
            self.unload(key, "idle", "idle")
        return min(max(seconds / 4, 0.2), 30.0)

    # ---- inside --------------------------------------------------------------------------

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
        """Start the worker of a slot :meth:`_reserve` made (and load its model when its
        kind loads at start).

        The worker starts under the lock, and only while the slot is still held:
        :meth:`close` or :meth:`unload` may have taken it while the evicted models were
        closing, and a worker started after that would run on with nobody to end it.

        Raises:
            EngineUnavailable: the slot was closed or unloaded meanwhile.
        """
        spec, client, kind = slot.spec, slot.client, slot.kind
        if kind.loads_on_cpu_tune and device.startswith("CPU"):
            # Before the lock: the first CPU load asks OpenVINO for the CPU's name (the
            # self-tune's key, kept by the client), which must not stall the tray's polls.
            client.cpu_properties()
        with self._lock:
            if self._closing or self._slots.get(key) is not slot:
                message = f"{spec.id} was unloaded while it loaded"
                raise EngineUnavailable(message, STOPPED, 1)
            client.add_listener(lambda status: self._on_client_status(key, spec.id, client, status))
            client.watch_idle(self._wake.set)  # the owner loop times its idle unload
            client.start()
            loop = self._loop
            if loop is not None:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(client.read_on_loop)
            if kind.loads_at_start:  # under the lock: no request sees it without a model
                client.load(spec, device)
            slot.started = True

    def _on_client_status(
        self, key: str, model_id: str, client: EngineClient, status: EngineStatus
    ) -> None:
        """A client's status changed (its lock is held: never take the scheduler's)."""
        self._unloads.note_status(client, model_id, status)  # left on its own, or crashed
        if status.unloaded is not None and status.model is None:
            # The client unloaded its model (idle, keep_alive 0) and started a spare
            # worker: the model has left; the owner loop ends that spare worker.
            self._drops.put((key, client, status.unloaded))
            self._wake.set()
        self._listeners.emit(key, status)

    def _drop_unloaded(self, key: str, client: EngineClient, reason: str) -> None:
        """End the spare worker a client started after unloading its model, unless it is
        the preferred model's: that one stays, as a lone client's would (``/health`` shows
        it idle and healthy, and the next request loads the model in it). Owner loop."""
        with self._lock:
            slot = self._slots.get(key)
            if slot is None or slot.client is not client or key == self._preferred:
                return
            status = client.status()
            if status.model is not None or not client.close_if_idle():
                return  # loaded again meanwhile
            self._forget(key, slot)
            self._changed.notify_all()
        logger.info("ending %s's spare worker (%s)", slot.spec.id, reason)
        client.close()
        self._notify()

    def _notify(self) -> None:
        """Wake waiting loads and tell the listeners models were placed or removed (no lock
        held)."""
        with self._changed:
            self._changed.notify_all()
        self._listeners.emit(None, None)
