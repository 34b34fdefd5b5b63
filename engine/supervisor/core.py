"""The state every part of one engine client shares: one lock, the status, streams and pipe.

The engine client (:class:`engine.supervisor.client.EngineClient`) is composed of parts, one
module each. Every part receives the one :class:`ClientState` and, in its constructor, the
parts it calls (never a part built after it, so the references form no circle):

- ``core`` (here): :class:`ClientState`: the lock, status updates and listeners, the
  in-flight streams, the worker process and its pipe, sending;
- ``routing``: :class:`~engine.supervisor.routing.Router` (state): a step's events to their
  request streams and to the status; ending every stream when a worker is lost;
- ``handle``: :class:`~engine.supervisor.handle.WorkerHandle` (state, router): spawning the
  worker, its pipe read on a thread or on the event loop, reaping retired workers;
- ``watchdog``: :class:`~engine.supervisor.watchdog.Watchdog` (state, router, handle):
  liveness pings, a hung worker killed, the crash restart policy, revive. The one call up
  the list, a worker's exit reported by the handle, goes through ``WorkerHandle.on_exit``,
  which the client sets to :meth:`Watchdog.on_worker_exit` once both exist;
- ``keepalive``: :class:`~engine.supervisor.keepalive.KeepAlive` (state, handle): when an
  idle model is due to go (keep_alive, ttl) and retiring it when asked (the scheduler's
  owner loop asks: it times every idle unload), release, close_if_idle / reopen;
- ``client``: :class:`~engine.supervisor.client.EngineClient`, the public face: builds the
  parts, start/close, load, submit, embed, rerank, cancel; delegates the rest.

Why one lock for all of them: a state change, the set of in-flight streams and the worker
being replaced must change together (submit is atomic with close_if_idle, a crash fails
exactly the streams its worker held), so the parts share :attr:`ClientState.lock` instead of
each holding a lock of its own that would need an order. A part's own attributes (the
reader's mode, the crash history, the keep-alive...) are guarded by that same lock.

Threading: :attr:`ClientState.lock` (re-entrant) guards every attribute of the state and of
the parts, except that the pipe's reader, to stay off the lock on every step, stores
:attr:`ClientState.heard` and clears :attr:`ClientState.ping_token` without it and compares a
Pong with :attr:`ClientState.handover` (single stores and reads; a watchdog check that races
one sees it on its next round). :attr:`ClientState.send_lock` serialises writes to the pipe
and is taken after ``lock`` or alone, never before it. Status listeners run under ``lock``
on whichever thread changed the state and must not block.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from engine.settings import Settings
from engine.supervisor.states import ANSWERING, STOPPED, EngineState, EngineStatus
from engine.worker.messages import Command, LoadModel

if TYPE_CHECKING:
    from engine.supervisor.streams import RequestStream

logger = logging.getLogger(__name__)

MAX_CONSECUTIVE_CRASHES = 3
"""Crashes within a minute after which automatic restarts pause (state ``error``)."""


class ClientState:
    """What every part of one engine client shares (see the module docstring).

    Attributes are plain fields for the parts to read and write under :attr:`lock`; the
    module docstring names the few the pipe's reader touches without it.
    """

    __slots__ = (
        "changed",
        "closing",
        "conn",
        "handover",
        "heard",
        "idle_since",
        "idle_watch",
        "ids",
        "listeners",
        "lock",
        "ping_sent",
        "ping_token",
        "process",
        "send_lock",
        "settings",
        "status",
        "streams",
        "wanted",
        "worker_loading",
    )

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.lock = threading.RLock()
        self.send_lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.ids = itertools.count(1)  # request ids, Ping tokens and hand-over tokens
        self.streams: dict[int, RequestStream] = {}
        self.listeners: list[Callable[[EngineStatus], None]] = []
        self.status = EngineStatus(state=STOPPED)
        self.process: Any = None
        self.conn: Connection | None = None
        self.closing = False  # closed, or refusing requests after close_if_idle
        self.wanted: LoadModel | None = None  # the model to (re)load after a restart
        # Since when no request is in flight (monotonic; None: busy or nothing loaded), for
        # the keep-alive; the router sets it when the last stream ends.
        self.idle_since: float | None = None
        self.worker_loading = False  # between LoadProgress and its outcome (also reloads)
        # Called (lock held, must not block) when the idle deadline may have moved: the
        # scheduler's owner loop, which times every idle unload, looks again.
        self.idle_watch: Callable[[], None] = _nothing
        # The reader's lock-free single stores: when the worker last said anything, the
        # watchdog's unanswered Ping, and the Pong the reader thread hands over at.
        self.heard = time.monotonic()
        self.ping_token: int | None = None
        self.ping_sent = self.heard  # when the watchdog sent ``ping_token`` (lock held)
        self.handover = 0

    def snapshot(self) -> EngineStatus:
        """The status with the in-flight request count and, when the worker should answer
        pings and has left one unanswered past ``Settings.stall_seconds``, how long (any
        thread)."""
        with self.lock:
            return replace(
                self.status, active_requests=len(self.streams), stalled_seconds=self._stalled()
            )

    def _stalled(self) -> float | None:
        """Seconds the worker has left the watchdog's ping unanswered, once past the stall
        bound, or None (lock held; ``ping_token`` is the reader's lock-free store, read
        once). A worker answers between steps, so only a step, a command or a freeze that
        outlasts the bound shows here."""
        bound = self.settings.stall_seconds
        if (
            bound <= 0
            or self.ping_token is None
            or self.process is None
            or self.status.state not in ANSWERING
        ):
            return None
        waited = time.monotonic() - self.ping_sent
        return waited if waited > bound else None

    def add_listener(self, listener: Callable[[EngineStatus], None]) -> Callable[[], None]:
        """Call ``listener`` on every state change; returns an undo."""
        with self.lock:
            self.listeners.append(listener)
        return lambda: self.listeners.remove(listener)

    def wait_for(self, states: Collection[EngineState], timeout: float) -> EngineStatus:
        """Block until the state is one of ``states`` (for the CLI and tests)."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while self.status.state not in states:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.changed.wait(remaining)
            return self.snapshot()

    def send(self, command: Command) -> None:
        """Write ``command`` to the worker's pipe (takes the send lock; OSError: no worker)."""
        with self.send_lock:
            conn = self.conn
            if conn is None:
                raise OSError("the engine is not running")
            conn.send(command)

    def update(self, **changes: Any) -> None:
        """Update the status and notify listeners (caller holds the lock)."""
        self.status = replace(self.status, **changes)
        self.changed.notify_all()
        self.idle_watch()
        snapshot = replace(
            self.status, active_requests=len(self.streams), stalled_seconds=self._stalled()
        )
        for listener in list(self.listeners):
            try:
                listener(snapshot)
            except Exception:
                logger.exception("engine status listener failed")

    def went_idle(self) -> None:
        """The last in-flight request ended: start the idle clock (caller holds the lock)."""
        self.idle_since = time.monotonic()
        self.changed.notify_all()
        self.idle_watch()


def _nothing() -> None:
    """No one watches the idle deadline (a client used alone)."""


def keep_alive_default(settings: Settings) -> float:
    """How long an idle model stays loaded by default (seconds; inf: forever)."""
    seconds = settings.idle_unload_seconds
    return math.inf if seconds < 0 else seconds
