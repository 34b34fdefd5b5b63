"""A cap on requests in flight, counted on requests rather than sockets (issue 25).

uvicorn's ``limit_concurrency`` counted open connections, so idle sockets (opened by any
process on the machine and never used) made every request a 503 before it was parsed. This
middleware counts what costs the server something: a request from the moment the app sees
it (its head complete) to the last byte of its answer, streams included. Past
:data:`MAX_REQUESTS` the newcomer is a 503 with ``Retry-After``, in the error shape of the
API its path belongs to (:func:`engine.server.errors.refusal`). Sockets themselves are only
a backstop (:mod:`engine.server.connection_table`).

A ``GET /health`` from loopback is always answered and not counted: it is what the tray, a
local monitor and a script ask to learn whether the server is up, and a full server is up.
The same from beyond loopback is counted like any request (it could be a flood).

Threading: the server's event loop only, so the count needs no lock.
"""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Receive, Scope, Send

from engine.server.auth import loopback_peer
from engine.server.errors import refusal

logger = logging.getLogger(__name__)

# The engine batches at most a few dozen sequences a step on a laptop; more requests than
# this only queue behind each other. 64 leaves room for every local client at once (IDE
# plugins, agents fanning out, the chat window) while bounding the memory held by requests.
MAX_REQUESTS = 64
# Requests here last seconds (generations); a client retrying sooner only meets the cap again.
RETRY_AFTER_SECONDS = 2
_ALWAYS_ANSWERED = ("GET", "/health")
_REPORT_SECONDS = 60.0  # refusals are logged at most once a minute


class RequestLimitMiddleware:
    """503 for a request beyond ``max_requests`` in flight (loopback ``GET /health`` exempt)."""

    def __init__(self, app: ASGIApp, max_requests: int = MAX_REQUESTS) -> None:
        self.app = app
        self.max_requests = max_requests
        self.in_flight = 0  # requests being answered now
        self.refused = 0  # since the start
        self._next_report = 0.0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _always_answered(scope):
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_requests:
            self._refuse()
            response = refusal(
                scope,
                503,
                f"the server is answering {self.in_flight} requests, its limit; retry in "
                f"{RETRY_AFTER_SECONDS} seconds",
                code="too_many_requests_in_flight",
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
            await response(scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1

    def _refuse(self) -> None:
        self.refused += 1
        now = time.monotonic()
        if now >= self._next_report:
            self._next_report = now + _REPORT_SECONDS
            logger.warning(
                "refused a request: %d in flight, the limit (%d refused since the start)",
                self.in_flight,
                self.refused,
            )


def _always_answered(scope: Scope) -> bool:
    return (scope["method"], scope["path"]) == _ALWAYS_ANSWERED and loopback_peer(scope)
