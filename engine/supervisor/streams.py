"""RequestStream: one request's events, as an async iterator on the loop that submitted it.

Split out of the engine client (issue 11) because a stream is the one supervision object the
server's pipeline holds: it needs to know nothing about processes, pipes or restarts, only
where its events arrive and how to ask for a cancel. Also here: why a request could not be
sent to the worker (:func:`unsendable`), so the refusal names the field.

Threading: the pipe's reader (a thread or the reading loop) calls :meth:`RequestStream._deliver`;
it hands events to the stream's own loop with ``call_soon_threadsafe`` unless it already runs
there. Iterating, :meth:`RequestStream.start` and :meth:`RequestStream.next_event` run on the
submitting loop only; :meth:`RequestStream.cancel` is safe on any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
from collections.abc import AsyncIterator
from typing import Any, Protocol

from engine.supervisor.states import RequestFailed
from engine.worker.messages import (
    Event,
    Finished,
    GenerationRequest,
    RequestAccepted,
    RequestRejected,
    TextDelta,
)

__all__ = ["RequestStream", "unsendable", "unsendable_text"]

logger = logging.getLogger(__name__)


class Canceller(Protocol):
    """What a stream needs of its client: a way to stop its request in the worker."""

    def cancel(self, request_id: int) -> None: ...


class RequestStream:
    """The events of one request, as an async iterator on the submitting loop.

    Yields :class:`TextDelta` events and ends after the :class:`Finished` event, which is
    also kept in :attr:`result`. Leaving the iteration early (or calling :meth:`cancel`)
    cancels the request in the engine.
    """

    def __init__(self, client: Canceller, request_id: int, loop: asyncio.AbstractEventLoop):
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


def unsendable(request: GenerationRequest, exc: Exception) -> tuple[str, str]:
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
    return param, unsendable_text(exc, param)


def unsendable_text(exc: Exception, param: str) -> str:
    logger.warning("a request could not be sent to the engine: %s: %s", type(exc).__name__, exc)
    if isinstance(exc, RecursionError):
        return f"{param} is nested too deeply for the engine; flatten it"
    return f"{param} holds a value the engine cannot take ({type(exc).__name__})"
