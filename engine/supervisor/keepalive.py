"""Idle unload: a model leaves memory once unused for its keep-alive, by ending its worker.

Unloading a model inside a worker gives back only ~8-30 MB (docs/benchmarks.md, "Model
lifecycle"): OpenVINO and the allocator keep the rest. So an idle model's worker is retired
(sent Shutdown, reaped, killed after 10 s) and a fresh worker with no model starts at once
(state ``idle``); the next request loads the model again. A running request is never
cancelled to free memory: :meth:`KeepAlive.release` and :meth:`KeepAlive.close_if_idle`
refuse while one is in flight (the scheduler evicts through the latter, atomic with submit).

Threading: the ``engine-idle`` thread waits on ``_changed`` (so under ``_lock``) for the
keep-alive to run out; every public method here is safe on any thread.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from datetime import UTC, datetime, timedelta

from engine.supervisor.core import keep_alive_default
from engine.supervisor.states import READY
from engine.supervisor.watchdog import Watchdog
from engine.worker.messages import Shutdown

logger = logging.getLogger(__name__)


class KeepAlive(Watchdog):
    """Ends an idle model's worker after its keep-alive; release and close_if_idle."""

    def _start_idle_timer(self) -> None:
        """Start the ``engine-idle`` thread unless it runs (lock held)."""
        if self._idle_thread is None or not self._idle_thread.is_alive():
            self._idle_thread = threading.Thread(
                target=self._idle_timer, name="engine-idle", daemon=True
            )
            self._idle_thread.start()

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
            self._start_idle_timer()

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
        self._keep_alive = keep_alive_default(self._settings)
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
