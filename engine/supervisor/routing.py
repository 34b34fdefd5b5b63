"""Routing the worker's events: each request's to its stream, the others to the status.

The worker sends one list of events per engine step. :meth:`Router.dispatch` groups them per
request and hands each stream its share in one go (one loop wake-up per stream and step),
keeps the request counters, and turns the worker's own events (started, loading, loaded,
load failed, unloaded) into states. A request that can no longer finish (its worker died or
hung, the client closed) is ended by :meth:`Router.fail_all`: rejected if the worker had not
accepted it yet, else finished with ``error``; never left hanging.

A part of the engine client (see :mod:`engine.supervisor.core`): it holds only the shared
:class:`~engine.supervisor.core.ClientState` and calls no other part.

Threading: ``dispatch`` runs on whichever reads the pipe (the reader thread or the reading
loop) and takes the state's lock only to look streams up and update counters (it stores
``heard`` and clears the watchdog's ``ping_token`` without it, and reads ``handover``);
the rest here holds or takes the lock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Final

from engine.supervisor.core import ClientState
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
    Synthesized,
    Transcribed,
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


class Router:
    """Routes worker events to request streams and to the engine status."""

    def __init__(self, state: ClientState) -> None:
        self._state = state

    def dispatch(self, events: list[Event], on_loop: asyncio.AbstractEventLoop | None) -> bool:
        """Route a step's events; returns True at the hand-over Pong."""
        shared = self._state
        per_stream: dict[int, list[Event]] = {}
        handover = False
        shared.heard = time.monotonic()  # the watchdog's sign of life
        for event in events:
            if isinstance(event, Pong):
                handover = handover or event.token == shared.handover
                if event.token == shared.ping_token:
                    shared.ping_token = None
                continue
            rid = getattr(event, "request_id", None)
            if rid is None:
                self._on_engine_event(event)
                continue
            per_stream.setdefault(rid, []).append(event)
        with shared.lock:
            for rid, items in per_stream.items():
                stream = shared.streams.get(rid)
                if stream is None:
                    continue
                for item in items:
                    if isinstance(item, RequestAccepted):
                        stream.prompt_tokens = item.prompt_tokens
                    elif isinstance(item, RequestRejected):
                        shared.streams.pop(rid, None)
                    elif isinstance(item, Finished):
                        shared.streams.pop(rid, None)
                        self._count(item)
                    elif isinstance(item, Embedded | Reranked | Transcribed | Synthesized):
                        shared.streams.pop(rid, None)
                stream._deliver(items, on_loop)
            if per_stream and not shared.streams:
                shared.went_idle()
        return handover

    def _count(self, finished: Finished) -> None:
        """Count a finished request in the status (lock held)."""
        status = self._state.status
        field = OUTCOMES[finished.finish_reason]
        self._state.status = replace(status, **{field: getattr(status, field) + 1})
        if finished.finish_reason == "cancelled":
            logger.info("request %d cancelled", finished.request_id)

    def _on_engine_event(self, event: Event) -> None:
        shared = self._state
        with shared.lock:
            if isinstance(event, WorkerStarted):
                state = shared.status.state
                new_state = state if state in (LOADING,) else IDLE
                shared.update(worker_pid=event.pid, state=new_state)
                if shared.wanted is not None and state == RESTARTING:
                    shared.update(state=LOADING, message=f"reloading {shared.wanted.spec.id}")
                    shared.send(shared.wanted)
            elif isinstance(event, LoadProgress):
                shared.worker_loading = True
                shared.update(message=event.message, damaged=None)
            elif isinstance(event, ModelLoaded):
                shared.worker_loading = False
                shared.idle_since = None if shared.streams else time.monotonic()
                shared.update(
                    state=READY,
                    damaged=None,
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
                shared.worker_loading = False
                shared.wanted = None
                shared.update(
                    state=ERROR,
                    message=f"could not load {event.spec.id}: {event.message}",
                    backend=None,
                    damaged=event.message if event.damaged else None,
                )
            elif isinstance(event, ModelUnloaded):
                shared.update(
                    state=IDLE,
                    model=None,
                    device=None,
                    backend=None,
                    context_length=None,
                    message=None,
                    chat_template=None,
                    fim_tokens=None,
                )

    def fail_all(self, message: str) -> None:
        """End every in-flight stream with ``message`` (lock held): rejected if its worker
        had not accepted it yet, else finished with ``error`` (and counted as failed)."""
        shared = self._state
        streams, shared.streams = shared.streams, {}
        for rid, stream in streams.items():
            event: Event
            if stream.prompt_tokens is None:
                event = RequestRejected(rid, "engine_restarting", message)
            else:
                event = Finished(rid, "error", stream.prompt_tokens, 0, None, None, error=message)
                shared.status = replace(shared.status, failed=shared.status.failed + 1)
            stream._deliver([event], None)

    def forget(self, request_id: int) -> None:
        """Drop a request's stream without an event (it was never sent, or it ended)."""
        with self._state.lock:
            streams = self._state.streams
            if streams.pop(request_id, None) is not None and not streams:
                self._state.went_idle()
