"""Liveness and restarts: pings to find a hung worker, and what follows a worker's death.

If the worker dies, in-flight requests end with an error, the worker is restarted and the
last model reloaded; the process hosting the client lives on. A worker that stops answering
(hung, or stopped by a debugger or the OS) is found by a watchdog that pings it: after
``Settings.engine_watchdog_seconds`` of silence (``engine_load_timeout_seconds`` while a
model loads) its requests end with an error and it is killed and restarted. Long before
that, a ping left unanswered past ``Settings.stall_seconds`` makes the status say so
(:attr:`EngineStatus.stalled_seconds`, ``stalled`` in /health): a report, not a kill.

Crashing :data:`MAX_CONSECUTIVE_CRASHES` times within ``Settings.crash_window_seconds``
pauses the automatic restarts (state ``error``) but nothing stays broken: the restarts
resume on their own one window after the last crash (this thread times it), and sooner when
a request, ``load()`` or :meth:`Watchdog.revive` (which a trusted /health calls) asks.
:attr:`EngineStatus.last_error` says what happened.

Why the timer lives here and not on the scheduler's owner loop: the crash budget is this
client's own state, a client used alone (tests, the CLI's checks) has no scheduler, and
this thread already wakes every ping interval; the owner loop places and unloads models
and would have to poll every client's budget for it.

A part of the engine client (see :mod:`engine.supervisor.core`): it receives the shared
state, the :class:`~engine.supervisor.routing.Router` (to end a lost worker's streams) and
the :class:`~engine.supervisor.handle.WorkerHandle` (to spawn the next worker); the client
wires :meth:`Watchdog.on_worker_exit` in as the handle's ``on_exit``.

Threading: the ``engine-watchdog`` thread pings, checks and reopens the crash budget; it
never waits for the send lock (a sender blocked on a hung worker's full pipe holds it, and
the watchdog must still be able to kill that worker). :meth:`Watchdog.on_worker_exit` runs
on the pipe's reader thread or an ``engine-exit`` thread; :meth:`Watchdog.revive` on any
thread. The state's lock guards this part's own attributes (the crash history, the pause,
the hung worker, the thread).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections import deque
from dataclasses import replace
from typing import Any

from engine.supervisor.core import MAX_CONSECUTIVE_CRASHES, ClientState
from engine.supervisor.handle import WorkerHandle
from engine.supervisor.routing import Router
from engine.supervisor.states import ERROR, LOADING, RESTARTING, STARTING, EngineIncident
from engine.worker.messages import Ping

__all__ = ["MAX_CONSECUTIVE_CRASHES", "Watchdog"]

logger = logging.getLogger(__name__)


class Watchdog:
    """Pings the worker, kills a hung one, restarts a dead one (within a crash budget)."""

    def __init__(self, state: ClientState, router: Router, handle: WorkerHandle) -> None:
        self._state = state
        self._router = router
        self._handle = handle
        self._crashes: deque[float] = deque(maxlen=MAX_CONSECUTIVE_CRASHES)
        self._paused = False  # crashed too often: no restart until the window passes
        self._reopens_at = 0.0  # when a pause ends on its own (monotonic)
        self._hung: Any = None  # the worker found hung (killed, its exit expected)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the watchdog thread unless it runs (lock held). It runs even with the
        watchdog and the stall report off: it also reopens a paused crash budget."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._watch, name="engine-watchdog", daemon=True)
            self._thread.start()

    def take_thread(self) -> threading.Thread | None:
        """Forget the watchdog thread, for :meth:`stop` to end it (lock held)."""
        thread, self._thread = self._thread, None
        return thread

    def stop(self, thread: threading.Thread | None, timeout: float) -> None:
        """End the watchdog ``thread`` (from :meth:`take_thread`); call without the lock."""
        self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def fresh_start(self) -> None:
        """A new model (``load``): its crashes count from zero (lock held)."""
        self._crashes.clear()

    def unpause(self) -> None:
        """Forget a pause after repeated crashes without restarting (``close``; lock held)."""
        self._paused = False

    def _watch(self) -> None:
        """Watchdog thread: ping the worker; restart it once it stops answering; end a
        crash pause once its window has passed."""
        while not self._stop.wait(self._next_wait()):
            try:
                self._reopen_if_due()
                if self._pings():
                    self._check_worker()
            except Exception:  # the watchdog must outlive any one check
                logger.exception("engine watchdog check failed")

    def _pings(self) -> bool:
        """Whether anything needs pings: the kill deadline or the stall report."""
        settings = self._state.settings
        return settings.engine_watchdog_seconds > 0 or settings.stall_seconds > 0

    def _next_wait(self) -> float:
        """Until the next ping, or the end of a crash pause when that comes first."""
        wait = self._ping_interval()
        with self._state.lock:
            if self._paused:
                wait = min(wait, max(0.05, self._reopens_at - time.monotonic()))
        return wait

    def _reopen_if_due(self) -> None:
        """Restart a worker whose restarts paused, once the crash window has passed: the
        budget reopens with no request, so a monitor sees the engine come back."""
        with self._state.lock:
            if self._paused and time.monotonic() >= self._reopens_at:
                self.revive_locked()

    def _silence_bound(self) -> float:
        """How long the worker may be silent now: a model load may legitimately take long
        (inf: the watchdog is off, the pings only feed the stall report)."""
        shared, settings = self._state, self._state.settings
        if settings.engine_watchdog_seconds <= 0:
            return math.inf
        if shared.worker_loading or shared.status.state in (STARTING, RESTARTING, LOADING):
            return settings.engine_load_timeout_seconds
        return settings.engine_watchdog_seconds

    def _ping_interval(self) -> float:
        """A quarter of the shorter bound (kill deadline, stall report), 0.05-5 s: a stall
        shows within ``stall_seconds`` plus a quarter of it."""
        settings = self._state.settings
        bounds = [b for b in (settings.engine_watchdog_seconds, settings.stall_seconds) if b > 0]
        return max(0.05, min([5.0, *(b / 4 for b in bounds)]))

    def _check_worker(self) -> None:
        shared = self._state
        with shared.lock:
            process = shared.process
            if process is None or shared.closing or process is self._hung:
                return
            silent = time.monotonic() - shared.heard
            if silent > self._silence_bound():
                self._on_unresponsive(process, silent)
                return
            if shared.ping_token is not None:
                return  # one Ping at a time: a hung worker's pipe must never fill up
            token = shared.ping_token = next(shared.ids)
            shared.ping_sent = time.monotonic()
            conn = shared.conn
        # Never wait for the send lock: a sender blocked on a hung worker's full pipe holds
        # it, and the watchdog must still be able to kill that worker.
        if conn is None or not shared.send_lock.acquire(blocking=False):
            token_sent = False
        else:
            try:
                conn.send(Ping(token))
                token_sent = True
            except OSError:
                token_sent = False
            finally:
                shared.send_lock.release()
        if not token_sent:
            with shared.lock:
                if shared.ping_token == token:
                    shared.ping_token = None

    def _on_unresponsive(self, process: Any, silent: float) -> None:
        """End a silent worker's requests and kill it; its exit restarts it (lock held)."""
        message = f"the engine stopped answering for {silent:.0f} s and was restarted"
        logger.error("engine worker %s: %s", process.pid, message)
        self._hung = process
        # The status first: a stream's end wakes its loop, which may look at it at once.
        self._state.update(
            state=RESTARTING, message=message, last_error=EngineIncident(message, time.time())
        )
        self._router.fail_all(f"{message}; the request was ended")
        with contextlib.suppress(OSError):
            process.kill()  # SIGKILL ends a stopped process too; the pipe then reports EOF

    def on_worker_exit(self, process: Any) -> None:
        """The worker ``process`` exited (its pipe reported EOF): restart it, or pause the
        restarts after too many crashes. Runs on the reader thread or an ``engine-exit``
        thread."""
        process.join(5)
        code = process.exitcode
        shared = self._state
        with shared.lock:
            if shared.closing or process is not shared.process:
                return  # closed, or retired on purpose (reap closes its pipe)
            if process is self._hung:  # killed by the watchdog: already reported
                message = shared.status.message or "the engine stopped answering"
            else:
                logger.error(
                    "engine worker %s exited unexpectedly (exit code %s)", process.pid, code
                )
                message = f"the engine worker stopped unexpectedly (exit code {code})"
                shared.update(last_error=EngineIncident(message, time.time(), code))
                self._router.fail_all(
                    f"{message}; the request was lost and the engine is restarting"
                )
            now = time.monotonic()
            window = shared.settings.crash_window_seconds
            self._crashes.append(now)
            recent = [t for t in self._crashes if now - t < window]
            if len(recent) >= MAX_CONSECUTIVE_CRASHES:
                shared.process = shared.conn = None
                self._paused = True
                self._reopens_at = now + window
                shared.update(
                    state=ERROR,
                    worker_pid=None,
                    message=f"the engine crashed {len(recent)} times in {_span(window)} "
                    f"({message}); it starts again in {window:.0f} s or on the next request, "
                    "or pick another model or device",
                )
                return
            shared.status = replace(shared.status, restarts=shared.status.restarts + 1)
            shared.update(state=RESTARTING, worker_pid=None, message=f"{message}; restarting")
            self._handle.spawn()

    def revive(self) -> bool:
        """Start a worker again if restarts were paused after repeated crashes (any thread;
        see :meth:`EngineClient.revive`). True when a new worker is on its way."""
        with self._state.lock:
            return self.revive_locked()

    def revive_locked(self) -> bool:
        """:meth:`revive` with the lock held."""
        shared = self._state
        if not self._paused or shared.closing:
            return False
        self._paused = False
        logger.info("starting the engine worker again after repeated crashes")
        shared.status = replace(shared.status, restarts=shared.status.restarts + 1)
        shared.update(state=RESTARTING, message="restarting the engine after repeated crashes")
        self._handle.spawn()
        return True


def _span(seconds: float) -> str:
    """A crash window in words: ``a minute`` for the default."""
    return "a minute" if seconds == 60 else f"{seconds:g} s"
