"""Bound request bodies in size and time.

A body larger than ``max_bytes`` is a 413 before it is read into memory. A body that does
not arrive within ``max_seconds`` of the first read is a 408: a client trickling a large
body a byte at a time would otherwise hold its connection, and a slot of the server's
connection limit, for as long as it likes. (Slow request *headers* are bounded in the
protocol, :mod:`engine.server.connection`.)
"""

from __future__ import annotations

import asyncio
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.server.errors import refusal

# Ample for 16 MiB over a slow link; a local client sends its body in milliseconds.
BODY_SECONDS = 60.0


class _TooLarge(Exception):
    pass


class _TooSlow(Exception):
    pass


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int, max_seconds: float = BODY_SECONDS) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_seconds = max_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for key, value in scope.get("headers", []):
            if key == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await self._reject(scope, receive, send, _TooLarge())
                return
        seen = 0
        body_done = False
        deadline: float | None = None
        started = False

        async def limited_receive() -> Message:
            nonlocal seen, body_done, deadline
            if body_done:  # afterwards the app only waits for a disconnect
                return await receive()
            deadline = deadline or time.monotonic() + self.max_seconds
            try:
                message = await asyncio.wait_for(receive(), deadline - time.monotonic())
            except TimeoutError:
                raise _TooSlow from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge
                body_done = not message.get("more_body", False)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except (_TooLarge, _TooSlow) as exc:
            if not started:
                await self._reject(scope, receive, send, exc)

    async def _reject(self, scope: Scope, receive: Receive, send: Send, exc: Exception) -> None:
        if isinstance(exc, _TooSlow):
            response = refusal(
                scope,
                408,
                f"the request body did not arrive within {self.max_seconds:g} seconds",
                code="body_timeout",
                headers={"Connection": "close"},
            )
        else:
            response = refusal(
                scope,
                413,
                f"request body larger than {self.max_bytes} bytes",
                code="body_too_large",
            )
        await response(scope, receive, send)
