"""EngineClient: the server process's handle on the engine worker process.

It starts the worker, sends it commands and turns its events into per-request async streams.
No event loop ever waits on inference: events are read either by a reader thread that blocks
on the pipe (releasing the GIL), or, once a server calls :meth:`EngineClient.read_on_loop`,
by that server's event loop itself (``add_reader``), which saves a thread wake-up and a GIL
hand-off per token (on a 2-core laptop every wake-up steals time from inference). Events go
to the loop that submitted their request: directly when it is the reading loop, otherwise
with ``call_soon_threadsafe``. Several loops may use one client at once (uvicorn's, a chat
window's worker thread). Loop reading needs a selector loop on a POSIX pipe; elsewhere
(Windows' pipes and proactor loops) the reader thread stays.

If the worker dies, in-flight requests end with an error, the worker is restarted and the
last model reloaded; the process hosting the client lives on. A worker that stops answering
(hung, or stopped by a debugger or the OS) is found by a watchdog that pings it: after
``Settings.engine_watchdog_seconds`` of silence (``engine_load_timeout_seconds`` while a
model loads) its requests end with an error and it is killed and restarted. Crashing
:data:`MAX_CONSECUTIVE_CRASHES` times in a minute pauses the automatic restarts (state
``error``) but nothing stays broken: the next request, ``load()`` or ``revive()`` (which
/health calls) starts a worker again. :attr:`EngineStatus.last_error` says what happened.

Threading: public methods are safe to call from any thread, except the two reading
hand-over methods, which run on the loop concerned. Status listeners run on whichever thread
reads the pipe and must not block (the desktop shell re-emits them as Qt signals).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import multiprocessing
import pickle
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypeVar

from engine import cpu_tune
from engine.models import ModelSpec
from engine.resources import demo_model_path
from engine.settings import Settings
from engine.supervisor.states import (
    ERROR,
    IDLE,
    LOADING,
    READY,
    RESTARTING,
    STARTING,
    STOPPED,
    EngineIncident,
    EngineState,
    EngineStatus,
    EngineUnavailable,
    LoadedModel,
    RequestFailed,
    RequestOutcome,
)
from engine.worker.messages import (
    Cancel,
    Command,
    Embed,
    Embedded,
    Event,
    Finished,
    GenerationRequest,
    LoadModel,
    LoadProgress,
    ModelLoaded,
    ModelLoadFailed,
    ModelUnloaded,
    Ping,
    Pong,
    RequestAccepted,
    RequestRejected,
    Rerank,
    Reranked,
    Shutdown,
    Submit,
    TextDelta,
    UnloadModel,
    WorkerStarted,
)
from engine.worker.process import worker_main

__all__ = [  # the states moved to engine.supervisor.states; importing them here keeps working
    "ERROR",
    "IDLE",
    "LOADING",
    "MAX_CONSECUTIVE_CRASHES",
    "READY",
    "RESTARTING",
    "STARTING",
    "STOPPED",
    "EngineClient",
    "EngineIncident",
    "EngineState",
    "EngineStatus",
    "EngineUnavailable",
    "RequestFailed",
    "RequestStream",
]

logger = logging.getLogger(__name__)

_Answer = TypeVar("_Answer", Embedded, Reranked)  # the one event a one-shot request ends with

MAX_CONSECUTIVE_CRASHES = 3


class RequestStream:
    """The events of one request, as an async iterator on the submitting loop.

    Yields :class:`TextDelta` events and ends after the :class:`Finished` event, which is
    also kept in :attr:`result`. Leaving the iteration early (or calling :meth:`cancel`)
    cancels the request in the engine.
    """

    def __init__(self, client: EngineClient, request_id: int, loop: asyncio.AbstractEventLoop):
        self._client = client
        self.request_id = request_id
        self._loop = loop
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        self.accepted: RequestAccepted | None = None
        self.result: Finished | None = None
        self.prompt_tokens: int | None = None  # set on the reader thread on acceptance

    def _deliver(self, events: list[Event], on_loop: asyncio.AbstractEventLoop | None) -> None:
        """Called by the pipe's reader; ``on_loop`` is the loop it runs on, if any."""
        if on_loop is self._loop:
            self._put_all(events)
        else:
            # A loop that closed first (asyncio.run returned with the stream unfinished) has
            # no one left to tell; the reader must not die of it.
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._put_all, events)

    def _put_all(self, events: list[Event]) -> None:
        for event in events:
            self._queue.put_nowait(event)

    async def next_event(self) -> Event:
        """The next raw event of this request (for one-shot requests such as embeddings)."""
        return await self._queue.get()

    async def start(self) -> RequestAccepted:
        """Wait until the worker accepted the request.

        Raises:
            RequestFailed: the worker rejected it (e.g. ``context_length_exceeded``).
        """
        event = await self._queue.get()
        if isinstance(event, RequestRejected):
            raise RequestFailed(event.code, event.message, event.param)
        if not isinstance(event, RequestAccepted):  # pragma: no cover - protocol violation
            raise RequestFailed("internal", f"unexpected engine event {event!r}")
        self.accepted = event
        return event

    def __aiter__(self) -> AsyncIterator[TextDelta | Finished]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[TextDelta | Finished]:
        if self.accepted is None:
            await self.start()
        try:
            while True:
                event = await self._queue.get()
                if isinstance(event, TextDelta):
                    yield event
                elif isinstance(event, Finished):
                    self.result = event
                    yield event
                    return
        finally:
            if self.result is None:
                self.cancel()

    def cancel(self) -> None:
        """Ask the engine to stop this request (idempotent; any thread)."""
        if self.result is None:
            self._client.cancel(self.request_id)


class EngineClient:
    """Starts, feeds and supervises the engine worker process."""

    def __init__(self, settings: Settings, *, backend: str = "auto") -> None:
        self._settings = settings
        self._backend = backend
        self._ctx = multiprocessing.get_context("spawn")
        self._lock = threading.RLock()
        self._send_lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._ids = itertools.count(1)
        self._streams: dict[int, RequestStream] = {}
        self._listeners: list[Callable[[EngineStatus], None]] = []
        self._status = EngineStatus(state=STOPPED)
        self._process: Any = None
        self._conn: Connection | None = None
        self._reader: threading.Thread | None = None
        # Reading on an event loop: the loop asked for, and where the hand-over stands
        # ("thread": a thread reads; "handing": it stops at Pong ``_handover``; "attaching":
        # the loop will add its reader; "loop": the loop reads).
        self._read_loop: asyncio.AbstractEventLoop | None = None
        self._reading = "thread"
        self._handover = 0
        self._wanted: LoadModel | None = None  # the model to (re)load after a restart
        self._crashes: deque[float] = deque(maxlen=MAX_CONSECUTIVE_CRASHES)
        self._paused = False  # crashed too often: no restart until something asks for one
        self._closing = False
        # Watchdog: when the worker last said anything, the unanswered Ping, and the worker
        # it found hung (killed, its exit expected).
        self._heard = time.monotonic()
        self._ping_token: int | None = None
        self._worker_loading = False  # between LoadProgress and its outcome (also reloads)
        self._hung: Any = None
        self._watch_stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        # Lifecycle: how long the loaded model stays loaded once idle (seconds; inf: forever;
        # a request's keep_alive sets it for the loaded model), since when it is idle
        # (monotonic; None: busy or nothing loaded), the idle timer's thread, and retired
        # workers (ended to free memory) whose pipes close once they exit.
        self._keep_alive = _keep_alive_default(settings)
        self._idle_since: float | None = None
        self._idle_thread: threading.Thread | None = None
        self._retired: dict[Any, Connection] = {}
        self._machine_key: str | None = None  # CPU name | OpenVINO version, for the self-tune

    # ---- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Spawn the worker process (returns at once; state goes to ``idle``)."""
        with self._lock:
            if self._process is not None:
                return
            self._closing = False
            self._spawn()
            if self._idle_thread is None or not self._idle_thread.is_alive():
                self._idle_thread = threading.Thread(
                    target=self._idle_timer, name="engine-idle", daemon=True
                )
                self._idle_thread.start()
            if self._watchdog is None and self._settings.engine_watchdog_seconds > 0:
                self._watch_stop.clear()
                self._watchdog = threading.Thread(
                    target=self._watch, name="engine-watchdog", daemon=True
                )
                self._watchdog.start()

    def _spawn(self) -> None:
        parent, child = self._ctx.Pipe(duplex=True)
        log_dir = str(self._settings.paths.log_dir)
        process = self._ctx.Process(
            target=worker_main,
            args=(child, log_dir, self._settings.log_level, self._settings.engine_below_normal),
            name="sidelight-engine",
            daemon=True,
        )
        self._set(
            state=STARTING if self._status.state != RESTARTING else RESTARTING, worker_pid=None
        )
        process.start()
        child.close()  # so the pipe reports EOF when the worker dies
        self._process, self._conn = process, parent
        self._heard, self._ping_token = time.monotonic(), None
        self._worker_loading = False
        loop = self._read_loop
        if loop is not None:
            self._reading = "attaching"
            try:
                loop.call_soon_threadsafe(self._attach, loop, process, parent)
                return
            except RuntimeError:  # the loop is closed
                self._read_loop = None
        self._start_thread(process, parent)

    def _start_thread(self, process: Any, conn: Connection) -> None:
        """Read ``conn`` on a new reader thread (caller holds the lock)."""
        self._reading = "thread"
        self._reader = threading.Thread(
            target=self._thread_reader,
            args=(process, conn),
            name=f"engine-reader-{process.pid}",
            daemon=True,
        )
        self._reader.start()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the worker; in-flight requests end with an error."""
        with self._lock:
            self._closing = True
            process, conn, reader = self._process, self._conn, self._reader
            watchdog, self._watchdog = self._watchdog, None
        self._watch_stop.set()
        if watchdog is not None and watchdog is not threading.current_thread():
            watchdog.join(timeout)
        if process is None:
            with self._lock:
                self._paused = False
                self._fail_all("the engine was shut down")
                self._set(state=STOPPED, worker_pid=None, model=None, device=None, backend=None)
            return
        with contextlib.suppress(OSError):
            self._send(Shutdown())
        process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join(timeout)
        self._detach_for_close(conn)
        if conn is not None:
            conn.close()
        if reader is not None and reader is not threading.current_thread():
            reader.join(timeout)
        with self._lock:
            self._process = self._conn = self._reader = None
            self._fail_all("the engine was shut down")
            self._set(state=STOPPED, worker_pid=None, model=None, device=None, backend=None)

    @property
    def reads_on(self) -> str:
        """Who reads the worker pipe now: ``"loop"``, or ``"thread"`` (also mid-hand-over)."""
        with self._lock:
            return "loop" if self._reading == "loop" else "thread"

    def read_on_loop(self) -> None:
        """Read worker events on the running event loop from now on (call on that loop).

        A server calls this when it starts so tokens reach its streams without a thread
        hop. The reader thread finishes what it has read and stops at a :class:`Pong`, so no
        event is lost or reordered. Does nothing where the loop cannot watch the pipe.
        """
        loop = asyncio.get_running_loop()
        if sys.platform == "win32" or not isinstance(loop, asyncio.SelectorEventLoop):
            logger.debug("engine events stay on the reader thread (%s)", type(loop).__name__)
            return
        with self._lock:
            if self._read_loop is not None:
                return
            self._read_loop = loop
            if self._conn is None or self._reading != "thread":
                return  # _spawn attaches the next worker's pipe to the loop
            self._handover = token = next(self._ids)
            self._reading = "handing"
        with contextlib.suppress(OSError):  # the worker died; _spawn attaches the next one
            self._send(Ping(token))

    def read_on_thread(self) -> None:
        """Give reading back to a reader thread (call on the reading loop before it stops)."""
        with self._lock:
            loop, self._read_loop = self._read_loop, None
            if loop is None:
                return
            if self._reading == "handing":
                self._reading = "thread"  # the thread ignores the Pong and reads on
            elif self._reading in ("attaching", "loop") and self._conn is not None:
                if self._reading == "loop":
                    loop.remove_reader(self._conn.fileno())
                self._start_thread(self._process, self._conn)  # a pending _attach backs off

    def _attach(self, loop: asyncio.AbstractEventLoop, process: Any, conn: Connection) -> None:
        """On ``loop``: start watching ``conn`` (scheduled by the thread or by _spawn).

        A stale call backs off: whenever the state is ``"attaching"``, an ``_attach`` for
        the current loop and pipe was scheduled after the last change of either.
        """
        with self._lock:
            if (
                self._reading != "attaching"
                or conn is not self._conn
                or self._read_loop is not loop
            ):
                return
            loop.add_reader(conn.fileno(), self._loop_reader, loop, process, conn)
            self._reading = "loop"

    def _detach_for_close(self, conn: Connection | None) -> None:
        """Stop the loop watching ``conn`` before it is closed (close() may run anywhere)."""
        with self._lock:
            loop, reading = self._read_loop, self._reading
        if conn is None or loop is None or reading != "loop":
            return
        done = threading.Event()

        def detach() -> None:
            with contextlib.suppress(ValueError, OSError):
                loop.remove_reader(conn.fileno())
            done.set()

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            detach()
            return
        with contextlib.suppress(RuntimeError):  # a closed loop watches nothing
            loop.call_soon_threadsafe(detach)
            done.wait(2.0)

    # ---- models ------------------------------------------------------------------------

    def load(self, spec: ModelSpec, device: str | None = None) -> None:
        """Load (or switch to) ``spec`` on ``device``; returns at once, state -> ``loading``."""
        device = device or self._settings.device
        properties = self._settings.device_properties(device)
        if device.startswith("CPU"):
            properties = {**properties, **self.cpu_properties()}
        command = LoadModel(
            spec=spec,
            device=device,
            properties=properties,
            kv_cache_gb=self._settings.kv_cache_gb,
            compile_cache_dir=str(self._settings.paths.compile_cache_dir),
            backend=self._backend,
            stream_interval=self._settings.stream_interval_ms / 1000,
            prompt_lookup=self._settings.prompt_lookup,
            draft_path=str(spec.draft_path)
            if spec.draft_path is not None and self._settings.draft_models
            else None,
            speculative_tokens=self._settings.speculative_tokens,
        )
        with self._lock:
            self._revive()  # a model switch is a fresh start after crashes, too
            self._wanted = command
            self._crashes.clear()
            self._keep_alive = _keep_alive_default(self._settings)
            self._idle_since = None
            self._set(
                state=LOADING,
                model=spec,
                device=device,
                message=f"loading {spec.id}",
                unloaded=None,
                cpu_properties=dict(properties) if device.startswith("CPU") else None,
            )
        self._send(command)

    def expect_load(self, spec: ModelSpec, device: str, why: str) -> None:
        """Say ``spec`` is on its way before :meth:`load` is called (state -> ``loading``).

        For start-up work that must come first (the CPU self-tune): requests naming
        ``spec`` meanwhile wait for it or get 503 + Retry-After, never 404 (the server's
        resolver finds it in the status). Sends nothing to the worker.
        """
        with self._lock:
            self._set(state=LOADING, model=spec, device=device, message=why)

    def cpu_properties(self) -> dict[str, Any]:
        """CPU properties to load with: explicit settings over the cached self-tune choice.

        Cheap (one small file read) unless the machine key is not known yet, which costs one
        OpenVINO core query, once.
        """
        cpu, cache_dir = self._settings.cpu, self._settings.paths.cache_dir
        if not cpu.self_tune or not (cache_dir / cpu_tune.CACHE_FILE).exists():
            return cpu.properties()
        if self._machine_key is None:
            self._machine_key = cpu_tune.machine_key()
        return cpu_tune.effective_properties(
            cpu, cpu_tune.cached_choice(cache_dir, self._machine_key)
        )

    def tune_cpu(self, model_dir: Path | None = None) -> None:
        """Run the CPU self-tune unless this machine's choice is cached (blocks seconds).

        Threading: call it from a background thread before the first CPU load, so no
        request waits for it and the model load does not skew its measurements.
        """
        cpu, cache_dir = self._settings.cpu, self._settings.paths.cache_dir
        if not cpu.self_tune:
            return
        key = self._machine_key or cpu_tune.machine_key()
        self._machine_key = key
        cached = cpu_tune.cached_choice(cache_dir, key)
        if cached is not None:
            logger.info("CPU self-tune: cached choice for %s: %s", key, cached or "defaults")
            return
        try:
            measure = cpu_tune.measure_decode(model_dir or demo_model_path(), cpu.properties())
            cpu_tune.self_tune(cpu, measure, cache_dir, key=key)
        except Exception:  # a failed tune leaves OpenVINO's defaults, never the server down
            logger.exception("CPU self-tune failed; keeping the configured CPU properties")

    def acquire(
        self, spec: ModelSpec, device: str | None, timeout: float | None = None
    ) -> EngineClient:
        """This client serving ``spec``: switches to it when another model is loaded and
        waits (bounded) for the load; blocks, so call it on a worker thread.

        A lone client holds one model, so a switch ends the old model's in-flight replies;
        :class:`engine.supervisor.scheduler.Scheduler` loads each model in a worker of its
        own instead (what the server and the desktop use).
        """
        status = self.status()
        if status.model is None or status.model.id != spec.id or status.state == IDLE:
            self.load(spec, device or status.device)
        wait = self._settings.load_wait_seconds if timeout is None else timeout
        self.wait_for({READY, ERROR}, wait)
        return self

    def running(self, model_id: str) -> EngineClient | None:
        """This client when ``model_id`` (any case, spaces trimmed) is loaded and ready."""
        status = self.status()
        wanted = model_id.strip().lower()
        if status.state == READY and status.model and status.model.id.lower() == wanted:
            return self
        return None

    def loaded(self) -> list[LoadedModel]:
        """The model this worker holds (none, or one)."""
        status = self.status()
        if status.model is None:
            return []
        return [
            LoadedModel(
                id=status.model.id,
                task=status.model.task,
                state=status.state,
                device=status.device,
                memory_mb=None,
                memory_estimated=True,
                context_length=status.context_length,
                expires_at=self.expires_at(),
                active_requests=status.active_requests,
                worker_pid=status.worker_pid,
                default=True,
            )
        ]

    def close_if_idle(self) -> bool:
        """Refuse new requests from now on if none is in flight (then :meth:`close` it);
        False while a request runs. Atomic with :meth:`submit`: the scheduler evicts a model
        this way and so never cancels a running request. Any thread."""
        with self._lock:
            if self._streams:
                return False
            self._closing = True
            self._changed.notify_all()
            return True

    def reopen(self) -> None:
        """Take requests again after :meth:`close_if_idle` when the close did not happen
        (the scheduler's eviction plan fell through). Any thread."""
        with self._lock:
            if not self._closing or self._process is None:
                return
            self._closing = False
            if self._idle_thread is None or not self._idle_thread.is_alive():
                self._idle_thread = threading.Thread(
                    target=self._idle_timer, name="engine-idle", daemon=True
                )
                self._idle_thread.start()

    def unload(self) -> None:
        """Unload the model inside the worker (the worker and OpenVINO stay: see release())."""
        with self._lock:
            self._wanted = None
        self._send(UnloadModel())

    def release(self, reason: str = "unloaded") -> bool:
        """Unload the model by ending its worker process, which returns all of its memory.

        An unload inside the worker frees only ~8-30 MB (docs/benchmarks.md, "Model
        lifecycle"): OpenVINO and the allocator keep the rest. Refused (returns False) while
        a request is in flight: a running request is never cancelled to free memory. A fresh
        worker with no model is started at once (state ``idle``); the next request for the
        model loads it again. Any thread.
        """
        with self._lock:
            if self._streams or self._process is None or self._closing:
                return False
            if self._status.model is None and self._wanted is None:
                return True
            self._retire(reason)
            return True

    def set_keep_alive(self, seconds: float) -> None:
        """How long the loaded model stays loaded once idle, from now on (any thread).

        Ollama's ``keep_alive`` / LM Studio's ``ttl`` of the latest request: seconds,
        ``math.inf`` for forever, 0 to unload as soon as no request is in flight. Loading
        another model resets it to ``Settings.idle_unload_seconds``.
        """
        with self._lock:
            self._keep_alive = max(0.0, seconds)
            self._changed.notify_all()

    def expires_at(self) -> datetime | None:
        """When the loaded model will be unloaded if no request comes (UTC), or None when
        nothing is loaded or it stays loaded forever. While requests run: now + keep_alive."""
        with self._lock:
            if self._status.model is None or math.isinf(self._keep_alive):
                return None
            idle_for = 0.0 if self._idle_since is None else time.monotonic() - self._idle_since
            left = max(0.0, self._keep_alive - idle_for)
            return datetime.now(UTC) + timedelta(seconds=left)

    def _retire(self, reason: str) -> None:
        """End the current worker and start a fresh one (lock held, no stream in flight)."""
        process, conn = self._process, self._conn
        model = self._status.model.id if self._status.model else "the model"
        logger.info("unloading %s (%s): ending worker %s", model, reason, process.pid)
        self._wanted = None
        self._idle_since = None
        self._keep_alive = _keep_alive_default(self._settings)
        if conn is not None:
            self._retired[process] = conn
            with contextlib.suppress(OSError):
                self._send(Shutdown())
        self._process = self._conn = None
        self._set(
            model=None,
            device=None,
            backend=None,
            context_length=None,
            chat_template=None,
            fim_tokens=None,
            load_seconds=None,
            message=f"{model} was unloaded ({reason})",
            unloaded=reason,
        )
        self._spawn()
        threading.Thread(
            target=self._reap, args=(process,), name="engine-retire", daemon=True
        ).start()

    def _reap(self, process: Any) -> None:
        """Wait for a retired worker to exit (kill it after 10 s), then close its pipe."""
        process.join(10)
        if process.is_alive():
            logger.warning("retired engine worker %s did not exit; killing it", process.pid)
            process.kill()
            process.join(5)
        with self._lock:
            conn = self._retired.pop(process, None)
        self._detach_for_close(conn)
        if conn is not None:
            conn.close()

    def _idle_timer(self) -> None:
        """Thread: end the model's worker once it was idle for its keep_alive."""
        with self._changed:
            while not self._closing:
                due = self._idle_due()
                now = time.monotonic()
                if due is not None and now >= due:
                    self._retire("keep_alive 0" if self._keep_alive == 0 else "idle")
                    continue
                self._changed.wait(None if due is None else due - now)

    def _idle_due(self) -> float | None:
        """When the idle model should go (monotonic), or None (lock held)."""
        if (
            self._status.state != READY
            or self._streams
            or self._idle_since is None
            or math.isinf(self._keep_alive)
        ):
            return None
        return self._idle_since + self._keep_alive

    def revive(self) -> bool:
        """Start a worker again if restarts were paused after repeated crashes (any thread).

        /health, the next request and :meth:`load` call this, so a crash budget only ever
        pauses restarts. Returns True when a new worker (and the last model) is on its way.
        """
        with self._lock:
            return self._revive()

    def _revive(self) -> bool:
        """:meth:`revive` with the lock held."""
        if not self._paused or self._closing:
            return False
        self._paused = False
        logger.info("starting the engine worker again after repeated crashes")
        self._status = replace(self._status, restarts=self._status.restarts + 1)
        self._set(state=RESTARTING, message="restarting the engine after repeated crashes")
        self._spawn()
        return True

    # ---- status ------------------------------------------------------------------------

    def status(self) -> EngineStatus:
        with self._lock:
            return replace(self._status, active_requests=len(self._streams))

    def add_listener(self, listener: Callable[[EngineStatus], None]) -> Callable[[], None]:
        """Call ``listener`` (on the reader thread) on every state change; returns an undo."""
        with self._lock:
            self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def wait_for(self, states: Collection[str], timeout: float) -> EngineStatus:
        """Block until the state is one of ``states`` (for the CLI and tests)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._status.state not in states:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
            return self.status()

    # ---- requests ----------------------------------------------------------------------

    def submit(self, request: GenerationRequest) -> RequestStream:
        """Queue a generation (its ``request_id`` is assigned here); iterate the returned
        stream on the calling loop.

        Raises:
            EngineUnavailable: no model is ready (the message says why and for how long).
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            self._check_ready()
            request_id = next(self._ids)
            stream = RequestStream(self, request_id, loop)
            self._streams[request_id] = stream
            if request.keep_alive is not None:  # applies once this request has ended
                self._keep_alive = max(0.0, request.keep_alive)
        request = replace(request, request_id=request_id, keep_alive=None)
        try:
            self._send(Submit(request))
        except OSError as exc:
            self._forget(request_id)
            raise EngineUnavailable("the engine is restarting", RESTARTING, 2) from exc
        except Exception as exc:  # it did not pickle (nothing was sent): refuse it alone
            self._forget(request_id)
            param, message = _unsendable(request, exc)
            stream._put_all([RequestRejected(request_id, "invalid_request", message, param)])
        return stream

    async def embed(
        self, spec: ModelSpec, texts: list[str], device: str | None = None, truncate: bool = False
    ) -> Embedded:
        """Embed ``texts`` with the embedding model ``spec`` (loaded beside the chat model).

        Raises:
            EngineUnavailable: the worker is not running.
            RequestFailed: the model could not be loaded or run.
        """
        device = device or self._settings.device
        return await self._one_shot(
            lambda rid: Embed(rid, spec, device, tuple(texts), truncate), "input", Embedded
        )

    async def rerank(
        self, spec: ModelSpec, query: str, documents: list[str], device: str | None = None
    ) -> Reranked:
        """Score ``documents`` against ``query`` with the reranker ``spec`` (loaded beside
        the chat model); the scores come in the documents' order.

        Raises:
            EngineUnavailable: the worker is not running.
            RequestFailed: a pair is too long for the model (``invalid_request`` naming
                ``documents.N`` or ``query``), or the model could not be loaded or run.
        """
        device = device or self._settings.device
        return await self._one_shot(
            lambda rid: Rerank(rid, spec, device, query, tuple(documents)), "documents", Reranked
        )

    async def _one_shot(
        self, command: Callable[[int], Command], param: str, answer: type[_Answer]
    ) -> _Answer:
        """Send the command built for a new request id and wait for its one ``answer``.

        The worker may run it beside a chat model (embeddings, reranking): it needs a
        running worker, not a loaded model. A caller that gives up (a client disconnected)
        cancels it in the worker.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            self._revive()
            if self._process is None or self._status.state == STOPPED or self._closing:
                raise EngineUnavailable("the engine is not running", self._status.state, None)
            request_id = next(self._ids)
            stream = RequestStream(self, request_id, loop)
            self._streams[request_id] = stream
        try:
            self._send(command(request_id))
        except OSError as exc:
            self._forget(request_id)
            raise EngineUnavailable("the engine is restarting", RESTARTING, 2) from exc
        except Exception as exc:  # it did not pickle (nothing was sent)
            self._forget(request_id)
            raise RequestFailed("invalid_request", _unsendable_text(exc, param), param) from exc
        event: Event | None = None
        try:
            event = await stream.next_event()
        finally:
            self._forget(request_id)
            if event is None:  # the caller gave up (a client disconnected): stop the batch
                with contextlib.suppress(OSError):
                    self._send(Cancel(request_id))
        if isinstance(event, answer):
            return event
        if isinstance(event, RequestRejected):
            raise RequestFailed(event.code, event.message, event.param)
        raise RequestFailed("internal", f"unexpected engine event {event!r}")

    def cancel(self, request_id: int) -> None:
        with self._lock:
            if request_id not in self._streams:
                return
        # If the worker is gone, its death handler ends the stream.
        with contextlib.suppress(OSError):
            self._send(Cancel(request_id))

    def _check_ready(self) -> None:
        if self._closing:
            raise EngineUnavailable("the model was unloaded; retry", STOPPED, 1)
        if self._revive():
            raise EngineUnavailable(
                "the engine is restarting after repeated crashes; retry shortly", RESTARTING, 2
            )
        state = self._status.state
        if state == READY:
            return
        if state in (LOADING, STARTING, RESTARTING):
            model = self._status.model.id if self._status.model else "the model"
            raise EngineUnavailable(f"{model} is {state}; retry shortly", state, 2)
        if state == ERROR:
            raise EngineUnavailable(f"the engine failed: {self._status.message}", state, None)
        raise EngineUnavailable("no model is loaded", state, None)

    def _forget(self, request_id: int) -> None:
        with self._lock:
            if self._streams.pop(request_id, None) is not None and not self._streams:
                self._idle_since = time.monotonic()
                self._changed.notify_all()

    def _send(self, command: Command) -> None:
        with self._send_lock:
            conn = self._conn
            if conn is None:
                raise OSError("the engine is not running")
            conn.send(command)

    # ---- reader thread -----------------------------------------------------------------

    def _thread_reader(self, process: Any, conn: Connection) -> None:
        while True:
            try:
                events: list[Event] = conn.recv()
            except (EOFError, OSError):
                break
            except Exception:  # a corrupt message must not kill supervision
                logger.exception("bad message from engine worker")
                continue
            if self._dispatch(events, None) and self._hand_over(process, conn):
                return  # the loop reads from here on
        self._on_worker_exit(process)

    def _hand_over(self, process: Any, conn: Connection) -> bool:
        """On the reader thread, at the hand-over Pong: schedule the loop's reader."""
        with self._lock:
            loop = self._read_loop
            if self._reading != "handing" or loop is None:
                return False
            self._reading = "attaching"
            try:
                loop.call_soon_threadsafe(self._attach, loop, process, conn)
            except RuntimeError:  # the loop closed meanwhile
                self._read_loop, self._reading = None, "thread"
                return False
            self._reader = None
            return True

    def _loop_reader(self, loop: asyncio.AbstractEventLoop, process: Any, conn: Connection) -> None:
        """On the reading loop, when the pipe is readable.

        ``recv`` may block the loop for the rest of a message, which the worker is already
        writing (only embeddings are large), never for the next engine step.
        """
        try:
            events: list[Event] = conn.recv()
        except (EOFError, OSError):
            with self._lock, contextlib.suppress(OSError):  # close() may have closed it
                loop.remove_reader(conn.fileno())
            with self._lock:
                if self._reading == "loop" and conn is self._conn:
                    self._reading = "thread"
            threading.Thread(
                target=self._on_worker_exit, args=(process,), name="engine-exit", daemon=True
            ).start()
            return
        except Exception:
            logger.exception("bad message from engine worker")
            return
        self._dispatch(events, loop)

    def _dispatch(self, events: list[Event], on_loop: asyncio.AbstractEventLoop | None) -> bool:
        """Route a step's events; returns True at the hand-over Pong."""
        per_stream: dict[int, list[Event]] = {}
        handover = False
        self._heard = time.monotonic()  # the watchdog's sign of life
        for event in events:
            if isinstance(event, Pong):
                handover = handover or event.token == self._handover
                if event.token == self._ping_token:
                    self._ping_token = None
                continue
            rid = getattr(event, "request_id", None)
            if rid is None:
                self._on_engine_event(event)
                continue
            per_stream.setdefault(rid, []).append(event)
        with self._lock:
            for rid, items in per_stream.items():
                stream = self._streams.get(rid)
                if stream is None:
                    continue
                for item in items:
                    if isinstance(item, RequestAccepted):
                        stream.prompt_tokens = item.prompt_tokens
                    elif isinstance(item, RequestRejected):
                        self._streams.pop(rid, None)
                    elif isinstance(item, Finished):
                        self._streams.pop(rid, None)
                        self._count(item)
                    elif isinstance(item, Embedded | Reranked):
                        self._streams.pop(rid, None)
                stream._deliver(items, on_loop)
            if per_stream and not self._streams:
                self._idle_since = time.monotonic()
                self._changed.notify_all()
        return handover

    def _count(self, finished: Finished) -> None:
        field: RequestOutcome
        if finished.finish_reason == "cancelled":
            field = "cancelled"
        elif finished.finish_reason == "error":
            field = "failed"
        else:
            field = "completed"
        self._status = replace(self._status, **{field: getattr(self._status, field) + 1})
        if finished.finish_reason == "cancelled":
            logger.info("request %d cancelled", finished.request_id)

    def _on_engine_event(self, event: Event) -> None:
        with self._lock:
            if isinstance(event, WorkerStarted):
                state = self._status.state
                new_state = state if state in (LOADING,) else IDLE
                self._set(worker_pid=event.pid, state=new_state)
                if self._wanted is not None and state == RESTARTING:
                    self._set(state=LOADING, message=f"reloading {self._wanted.spec.id}")
                    self._send(self._wanted)
            elif isinstance(event, LoadProgress):
                self._worker_loading = True
                self._set(message=event.message)
            elif isinstance(event, ModelLoaded):
                self._worker_loading = False
                self._idle_since = None if self._streams else time.monotonic()
                self._set(
                    state=READY,
                    model=event.spec,
                    device=event.device,
                    message=None,
                    backend=event.backend,
                    context_length=event.context_length,
                    load_seconds=round(event.load_seconds, 2),
                    chat_template=event.chat_template,
                    fim_tokens=event.fim_tokens,
                )
            elif isinstance(event, ModelLoadFailed):
                self._worker_loading = False
                self._wanted = None
                self._set(
                    state=ERROR,
                    message=f"could not load {event.spec.id}: {event.message}",
                    backend=None,
                )
            elif isinstance(event, ModelUnloaded):
                self._set(
                    state=IDLE,
                    model=None,
                    device=None,
                    backend=None,
                    context_length=None,
                    message=None,
                    chat_template=None,
                    fim_tokens=None,
                )

    def _on_worker_exit(self, process: Any) -> None:
        process.join(5)
        code = process.exitcode
        with self._lock:
            if self._closing or process is not self._process:
                return  # closed, or retired on purpose (_reap closes its pipe)
            if process is self._hung:  # killed by the watchdog: already reported
                message = self._status.message or "the engine stopped answering"
            else:
                logger.error(
                    "engine worker %s exited unexpectedly (exit code %s)", process.pid, code
                )
                message = f"the engine worker stopped unexpectedly (exit code {code})"
                self._set(last_error=EngineIncident(message, time.time(), code))
                self._fail_all(f"{message}; the request was lost and the engine is restarting")
            self._crashes.append(time.monotonic())
            recent = [t for t in self._crashes if time.monotonic() - t < 60]
            if len(recent) >= MAX_CONSECUTIVE_CRASHES:
                self._process = self._conn = None
                self._paused = True
                self._set(
                    state=ERROR,
                    worker_pid=None,
                    message=f"the engine crashed {len(recent)} times in a minute ({message}); "
                    "it starts again on the next request, or pick another model or device",
                )
                return
            self._status = replace(self._status, restarts=self._status.restarts + 1)
            self._set(state=RESTARTING, worker_pid=None, message=f"{message}; restarting")
            self._spawn()

    # ---- watchdog ----------------------------------------------------------------------

    def _watch(self) -> None:
        """Watchdog thread: ping the worker; restart it once it stops answering."""
        while not self._watch_stop.wait(self._ping_interval()):
            try:
                self._check_worker()
            except Exception:  # the watchdog must outlive any one check
                logger.exception("engine watchdog check failed")

    def _silence_bound(self) -> float:
        """How long the worker may be silent now: a model load may legitimately take long."""
        if self._worker_loading or self._status.state in (STARTING, RESTARTING, LOADING):
            return self._settings.engine_load_timeout_seconds
        return self._settings.engine_watchdog_seconds

    def _ping_interval(self) -> float:
        return max(0.05, min(5.0, self._settings.engine_watchdog_seconds / 4))

    def _check_worker(self) -> None:
        with self._lock:
            process = self._process
            if process is None or self._closing or process is self._hung:
                return
            silent = time.monotonic() - self._heard
            if silent > self._silence_bound():
                self._on_unresponsive(process, silent)
                return
            if self._ping_token is not None:
                return  # one Ping at a time: a hung worker's pipe must never fill up
            token = self._ping_token = next(self._ids)
            conn = self._conn
        # Never wait for the send lock: a sender blocked on a hung worker's full pipe holds
        # it, and the watchdog must still be able to kill that worker.
        if conn is None or not self._send_lock.acquire(blocking=False):
            token_sent = False
        else:
            try:
                conn.send(Ping(token))
                token_sent = True
            except OSError:
                token_sent = False
            finally:
                self._send_lock.release()
        if not token_sent:
            with self._lock:
                if self._ping_token == token:
                    self._ping_token = None

    def _on_unresponsive(self, process: Any, silent: float) -> None:
        """End a silent worker's requests and kill it; its exit restarts it (lock held)."""
        message = f"the engine stopped answering for {silent:.0f} s and was restarted"
        logger.error("engine worker %s: %s", process.pid, message)
        self._hung = process
        # The status first: a stream's end wakes its loop, which may look at it at once.
        self._set(
            state=RESTARTING, message=message, last_error=EngineIncident(message, time.time())
        )
        self._fail_all(f"{message}; the request was ended")
        with contextlib.suppress(OSError):
            process.kill()  # SIGKILL ends a stopped process too; the pipe then reports EOF

    def _fail_all(self, message: str) -> None:
        streams, self._streams = self._streams, {}
        for rid, stream in streams.items():
            event: Event
            if stream.prompt_tokens is None:
                event = RequestRejected(rid, "engine_restarting", message)
            else:
                event = Finished(rid, "error", stream.prompt_tokens, 0, None, None, error=message)
                self._status = replace(self._status, failed=self._status.failed + 1)
            stream._deliver([event], None)

    def _set(self, **changes: Any) -> None:
        """Update the status and notify listeners (caller holds the lock)."""
        self._status = replace(self._status, **changes)
        self._changed.notify_all()
        snapshot = replace(self._status, active_requests=len(self._streams))
        for listener in list(self._listeners):
            try:
                listener(snapshot)
            except Exception:
                logger.exception("engine status listener failed")


def _keep_alive_default(settings: Settings) -> float:
    seconds = settings.idle_unload_seconds
    return math.inf if seconds < 0 else seconds


def _unsendable(request: GenerationRequest, exc: Exception) -> tuple[str, str]:
    """The field that kept ``request`` from being pickled, and a message naming it."""
    fields: dict[str, Any] = {
        "messages": request.messages,
        "tools": request.tools,
        "chat_template_kwargs": request.chat_template_kwargs,
        "prompt": request.prompt,
        "suffix": request.suffix,
        "stop": request.stop,
    }
    if request.constraint is not None:
        fields[request.constraint.param] = request.constraint
    param = "messages"
    for name, value in fields.items():
        try:
            pickle.dumps(value)
        except Exception:
            param = name
            break
    return param, _unsendable_text(exc, param)


def _unsendable_text(exc: Exception, param: str) -> str:
    logger.warning("a request could not be sent to the engine: %s: %s", type(exc).__name__, exc)
    if isinstance(exc, RecursionError):
        return f"{param} is nested too deeply for the engine; flatten it"
    return f"{param} holds a value the engine cannot take ({type(exc).__name__})"
