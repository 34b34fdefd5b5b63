"""Liveness and restarts: pings to find a hung worker, and what follows a worker's death.

If the worker dies, in-flight requests end with an error, the worker is restarted and the
last model reloaded; the process hosting the client lives on. A worker that stops answering
(hung, or stopped by a debugger or the OS) is found by a watchdog that pings it: after
``Settings.engine_watchdog_seconds`` of silence (``engine_load_timeout_seconds`` while a
model loads) its requests end with an error and it is killed and restarted. Crashing
:data:`MAX_CONSECUTIVE_CRASHES` times in a minute pauses the automatic restarts (state
``error``) but nothing stays broken: the next request, ``load()`` or :meth:`Watchdog.revive`
(which /health calls) starts a worker again. :attr:`EngineStatus.last_error` says what
happened.

Threading: the ``engine-watchdog`` thread pings and checks; it never waits for the send lock
(a sender blocked on a hung worker's full pipe holds it, and the watchdog must still be able
to kill that worker). :meth:`Watchdog._on_worker_exit` runs on the pipe's reader thread or
an ``engine-exit`` thread; :meth:`Watchdog.revive` on any thread.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import replace
from typing import Any

from engine.supervisor.core import MAX_CONSECUTIVE_CRASHES
from engine.supervisor.handle import WorkerHandle
from engine.supervisor.states import ERROR, LOADING, RESTARTING, STARTING, EngineIncident
from engine.worker.messages import Ping

__all__ = ["MAX_CONSECUTIVE_CRASHES", "Watchdog"]

logger = logging.getLogger(__name__)


class Watchdog(WorkerHandle):
    """Pings the worker, kills a hung one, restarts a dead one (within a crash budget)."""

    def _start_watchdog(self) -> None:
        """Start the watchdog thread unless it runs or is turned off (lock held)."""
        if self._watchdog is None and self._settings.engine_watchdog_seconds > 0:
            self._watch_stop.clear()
            self._watchdog = threading.Thread(
                target=self._watch, name="engine-watchdog", daemon=True
            )
            self._watchdog.start()

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
