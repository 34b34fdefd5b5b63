"""The state every part of the engine client shares, and the few helpers all of them use.

The engine client (:class:`engine.supervisor.client.EngineClient`) is built in layers, one
module each, every layer using only the ones below it:

- ``core`` (here): the shared state, one lock, status updates and listeners, sending;
- ``routing``: the worker's events to their request streams and to the status;
- ``handle``: the worker process and its pipe: spawning, the reader (thread or event loop),
  reaping retired workers;
- ``watchdog``: liveness pings, a hung worker killed, the crash restart policy;
- ``keepalive``: idle unload (keep_alive, ttl), release, close_if_idle for the scheduler;
- ``client``: the public face: start/close, load, submit, embed, rerank, cancel.

Why one lock for all of them: a state change, the set of in-flight streams and the worker
being replaced must change together (submit is atomic with close_if_idle, a crash fails
exactly the streams its worker held), so the layers share ``_lock`` instead of each holding
a lock of its own that would need an order.

Threading: ``_lock`` (re-entrant) guards every attribute below, except that the pipe's
reader, to stay off the lock on every step, stores ``_heard`` and clears ``_ping_token``
without it and compares a Pong with ``_handover`` (single stores and reads; a watchdog check
that races one sees it on its next round). ``_send_lock``
serialises writes to the pipe and is taken after ``_lock`` or alone, never before it. Status
listeners run under ``_lock`` on whichever thread changed the state and must not block.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import multiprocessing
import threading
import time
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Literal

from engine.settings import Settings
from engine.supervisor.states import STOPPED, EngineState, EngineStatus
from engine.worker.messages import Command, LoadModel

if TYPE_CHECKING:
    from engine.supervisor.streams import RequestStream

logger = logging.getLogger(__name__)

MAX_CONSECUTIVE_CRASHES = 3
"""Crashes within a minute after which automatic restarts pause (state ``error``)."""

ReadMode = Literal["thread", "handing", "attaching", "loop"]
"""Who reads the worker pipe: a reader thread; the thread, until it reaches the hand-over
Pong; the loop, once its scheduled ``add_reader`` runs; the loop."""


class ClientCore:
    """The engine client's shared state and its helpers (see the module docstring)."""

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
        # Reading on an event loop (handle): the loop asked for, and where the hand-over
        # stands (see ReadMode; "handing" stops at Pong ``_handover``).
        self._read_loop: asyncio.AbstractEventLoop | None = None
        self._reading: ReadMode = "thread"
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
        # Lifecycle (keepalive): how long the loaded model stays loaded once idle (seconds;
        # inf: forever; a request's keep_alive sets it for the loaded model), since when it
        # is idle (monotonic; None: busy or nothing loaded), the idle timer's thread, and
        # retired workers (ended to free memory) whose pipes close once they exit.
        self._keep_alive = keep_alive_default(settings)
        self._idle_since: float | None = None
        self._idle_thread: threading.Thread | None = None
        self._retired: dict[Any, Connection] = {}
        self._machine_key: str | None = None  # CPU name | OpenVINO version, for the self-tune

    def status(self) -> EngineStatus:
        with self._lock:
            return replace(self._status, active_requests=len(self._streams))

    def add_listener(self, listener: Callable[[EngineStatus], None]) -> Callable[[], None]:
        """Call ``listener`` (on the reader thread) on every state change; returns an undo."""
        with self._lock:
            self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def wait_for(self, states: Collection[EngineState], timeout: float) -> EngineStatus:
        """Block until the state is one of ``states`` (for the CLI and tests)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._status.state not in states:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
            return self.status()

    def _send(self, command: Command) -> None:
        with self._send_lock:
            conn = self._conn
            if conn is None:
                raise OSError("the engine is not running")
            conn.send(command)

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


def keep_alive_default(settings: Settings) -> float:
    """How long an idle model stays loaded by default (seconds; inf: forever)."""
    seconds = settings.idle_unload_seconds
    return math.inf if seconds < 0 else seconds
