"""Routing the worker's events: each request's to its stream, the others to the status.

The worker sends one list of events per engine step. :meth:`EventRouter._dispatch` groups
them per request and hands each stream its share in one go (one loop wake-up per stream and
step), keeps the request counters, and turns the worker's own events (started, loading,
loaded, load failed, unloaded) into states. A request that can no longer finish (its worker
died or hung, the client closed) is ended by :meth:`EventRouter._fail_all`: rejected if the
worker had not accepted it yet, else finished with ``error``; never left hanging.

Threading: ``_dispatch`` runs on whichever reads the pipe (the reader thread or the reading
loop) and takes ``_lock`` only to look streams up and update counters (it stores the
watchdog's ``_heard`` and clears its Ping without it); the rest here holds or takes ``_lock``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Final

from engine.supervisor.core import ClientCore
from engine.supervisor.states import (
    ERROR,
    IDLE,
    LOADING,
    READY,
    RESTARTING,
    RequestOutcome,
)
from engine.worker.messages import (
    Embedded,
    Event,
    Finished,
    FinishReason,
    LoadProgress,
    ModelLoaded,
    ModelLoadFailed,
    ModelUnloaded,
    Pong,
    RequestAccepted,
    RequestRejected,
    Reranked,
    WorkerStarted,
)

logger = logging.getLogger(__name__)

OUTCOMES: Final[dict[FinishReason, RequestOutcome]] = {
    "stop": "completed",
    "length": "completed",
    "cancelled": "cancelled",
    "error": "failed",
}
"""How each way a request ends is counted in :class:`EngineStatus`."""


class EventRouter(ClientCore):
    """Routes worker events to request streams and to the engine status."""

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
        """Count a finished request in the status (lock held)."""
        field = OUTCOMES[finished.finish_reason]
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

    def _forget(self, request_id: int) -> None:
        with self._lock:
            if self._streams.pop(request_id, None) is not None and not self._streams:
                self._idle_since = time.monotonic()
                self._changed.notify_all()
