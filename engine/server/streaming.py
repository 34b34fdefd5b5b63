"""Server-sent events and client-disconnect handling shared by every streaming route.

A client that goes away must stop its generation within one engine step, not when the next
token fails to send. So the SSE response always listens for ``http.disconnect`` next to the
body (Starlette skips that listener on ASGI 2.4 servers), and non-streaming handlers race
their work against the same signal.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

T = TypeVar("T")


class ClientGone(Exception):
    """The HTTP client disconnected before the answer was ready."""


def sse(data: dict[str, Any] | str) -> str:
    payload = (
        data
        if isinstance(data, str)
        else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    )
    return f"data: {payload}\n\n"


class EventStreamResponse(StreamingResponse):
    """A token stream (SSE by default) that is cancelled as soon as the client disconnects."""

    def __init__(
        self,
        content: AsyncIterator[str],
        headers: dict[str, str] | None = None,
        media_type: str = "text/event-stream",
    ) -> None:
        super().__init__(
            content,
            media_type=media_type,
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})},
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = asyncio.ensure_future(self.stream_response(send))
        watcher = asyncio.ensure_future(_wait_for_disconnect(receive))
        try:
            done, _ = await asyncio.wait({body, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (body, watcher):
                if not task.done():
                    task.cancel()
            await asyncio.gather(body, watcher, return_exceptions=True)
        if body in done and body.exception() is not None:
            exc = body.exception()
            if not isinstance(exc, OSError):
                raise exc  # type: ignore[misc]


async def _wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Run ``work``; cancel it and raise :class:`ClientGone` if the client disconnects."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_for_disconnect(request.receive))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    if task.cancelled():
        await asyncio.gather(task, return_exceptions=True)
        raise ClientGone
    return task.result()
