"""Idle unload: a model leaves memory once unused for its keep-alive, by ending its worker.

Unloading a model inside a worker gives back only ~8-30 MB (docs/benchmarks.md, "Model
lifecycle"): OpenVINO and the allocator keep the rest. So an idle model's worker is retired
(sent Shutdown, reaped, killed after 10 s) and a fresh worker with no model starts at once
(state ``idle``); the next request loads the model again. A running request is never
cancelled to free memory: :meth:`KeepAlive.release` and :meth:`KeepAlive.close_if_idle`
refuse while one is in flight (the scheduler evicts through the latter, atomic with submit).

A part of the engine client (see :mod:`engine.supervisor.core`): it receives the shared
state (whose ``idle_since`` the router sets when the last request ends) and the
:class:`~engine.supervisor.handle.WorkerHandle` that spawns the fresh worker and reaps the
retired one.

No thread of its own: the scheduler's owner loop (``engine-scheduler``) times every idle
unload, asking :meth:`KeepAlive.idle_due` and calling :meth:`KeepAlive.retire_if_due`; the
state's ``idle_watch`` tells it when the deadline may have moved (a request ended, a
keep-alive was set, the state changed). A client used alone never unloads for being idle.

Threading: a retired worker is reaped on an ``engine-retire`` thread; every public method
here is safe on any thread. The state's lock guards this part's own attribute (the
keep-alive).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from datetime import UTC, datetime, timedelta

from engine.supervisor.core import ClientState, keep_alive_default
from engine.supervisor.handle import WorkerHandle
from engine.supervisor.states import READY
from engine.worker.messages import Shutdown

logger = logging.getLogger(__name__)


class KeepAlive:
    """Ends an idle model's worker after its keep-alive; release and close_if_idle."""

    def __init__(self, state: ClientState, handle: WorkerHandle) -> None:
        self._state = state
        self._handle = handle
        # How long the loaded model stays loaded once idle (seconds; inf: forever; a
        # request's keep_alive sets it for the loaded model).
        self._keep_alive = keep_alive_default(state.settings)

    def idle_due(self) -> float | None:
        """When the idle model should go (monotonic), or None: busy, not ready, closing, or
        kept forever. Any thread."""
        with self._state.lock:
            return None if self._state.closing else self._idle_due()

    def retire_if_due(self, now: float) -> bool:
        """End the idle model's worker (and start a fresh one) if its keep-alive ran out by
        ``now``; True when it did. Any thread (the scheduler's owner loop)."""
        with self._state.lock:
            due = None if self._state.closing else self._idle_due()
            if due is None or now < due:
                return False
            self._retire("keep_alive 0" if self._keep_alive == 0 else "idle")
            return True

    def reset(self) -> None:
        """A new model: the default keep-alive, the idle clock stopped (lock held)."""
        self._keep_alive = keep_alive_default(self._state.settings)
        self._state.idle_since = None

    def keep_after_request(self, seconds: float) -> None:
        """A request's keep_alive, applied once it has ended (lock held, by submit)."""
        self._keep_alive = max(0.0, seconds)

    def close_if_idle(self) -> bool:
        """Refuse new requests if none is in flight; False while one runs (see
        :meth:`EngineClient.close_if_idle`). Atomic with submit, through the one lock."""
        with self._state.lock:
            if self._state.streams:
                return False
            self._state.closing = True
            self._state.changed.notify_all()
            return True

    def reopen(self) -> None:
        """Take requests again after :meth:`close_if_idle` (see :meth:`EngineClient.reopen`)."""
        with self._state.lock:
            if not self._state.closing or self._state.process is None:
                return
            self._state.closing = False
            self._state.idle_watch()

    def release(self, reason: str = "unloaded") -> bool:
        """End the worker to free all of its memory, and start a fresh one; False while a
        request is in flight (see :meth:`EngineClient.release`)."""
        shared = self._state
        with shared.lock:
            if shared.streams or shared.process is None or shared.closing:
                return False
            if shared.status.model is None and shared.wanted is None:
                return True
            self._retire(reason)
            return True

    def set_keep_alive(self, seconds: float) -> None:
        """How long the loaded model stays loaded once idle, from now on (see
        :meth:`EngineClient.set_keep_alive`); the owner loop looks again."""
        with self._state.lock:
            self._keep_alive = max(0.0, seconds)
            self._state.changed.notify_all()
            self._state.idle_watch()

    def expires_at(self) -> datetime | None:
        """When the idle model goes (UTC), or None (see :meth:`EngineClient.expires_at`)."""
        shared = self._state
        with shared.lock:
            if shared.status.model is None or math.isinf(self._keep_alive):
                return None
            idle_since = shared.idle_since
            idle_for = 0.0 if idle_since is None else time.monotonic() - idle_since
            left = max(0.0, self._keep_alive - idle_for)
            return datetime.now(UTC) + timedelta(seconds=left)

    def _retire(self, reason: str) -> None:
        """End the current worker and start a fresh one (lock held, no stream in flight)."""
        shared = self._state
        process, conn = shared.process, shared.conn
        model = shared.status.model.id if shared.status.model else "the model"
        logger.info("unloading %s (%s): ending worker %s", model, reason, process.pid)
        shared.wanted = None
        shared.idle_since = None
        self._keep_alive = keep_alive_default(shared.settings)
        if conn is not None:
            self._handle.retired[process] = conn
            with contextlib.suppress(OSError):
                shared.send(Shutdown())
        shared.process = shared.conn = None
        shared.update(
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
        self._handle.spawn()
        threading.Thread(
            target=self._handle.reap, args=(process,), name="engine-retire", daemon=True
        ).start()

    def _idle_due(self) -> float | None:
        """When the idle model should go (monotonic), or None (lock held)."""
        shared = self._state
        if (
            shared.status.state != READY
            or shared.streams
            or shared.idle_since is None
            or math.isinf(self._keep_alive)
        ):
            return None
        return shared.idle_since + self._keep_alive
