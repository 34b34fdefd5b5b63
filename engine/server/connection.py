"""uvicorn's h11 protocol with a deadline for each request head and a place in the
:class:`~engine.server.connection_table.ConnectionTable` (slowloris and idle-socket defence).

uvicorn times out a connection only while it idles *between* requests (keep-alive); h11 has
no timeout at all, and before the first request nothing applies. A client that connects and
sends nothing, or sends its headers a byte at a time, held its connection forever. Here the
whole request head must arrive within ``head_seconds``: of the connection opening for the
first request, of its first byte for each later one. Otherwise the client gets a 408 and the
connection is closed. The body has its own bound (:mod:`engine.server.body_limit`), and a
head larger than h11's 16 KiB is a 400.

Each connection also joins the server's table when it opens (which may close an idle one to
make room, or turn this one away with a 503 when every other is answering a request), moves
to the table's idle end after each answer, and leaves it when it closes.

Runs on the server's event loop only, as every asyncio protocol does.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from engine.server.connection_table import ConnectionTable

logger = logging.getLogger(__name__)

HEAD_SECONDS = 10.0
_TIMEOUT_BODY = b"the request headers took too long\n"
_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_TIMEOUT_BODY), _TIMEOUT_BODY)
)
_FULL_BODY = b"every connection of this server is answering a request; try again shortly\n"
_FULL_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"retry-after: 1\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
    % (len(_FULL_BODY), _FULL_BODY)
)


class TimedH11Protocol(H11Protocol):
    """:class:`H11Protocol` that closes a connection whose request head is too slow, and
    keeps its place in ``table`` (none: no socket cap)."""

    head_seconds = HEAD_SECONDS
    table: ConnectionTable | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        peer = self.client[0] if self.client else None
        if self.table is not None and not self.table.admit(self, peer):
            self.transport.write(_FULL_RESPONSE)
            self.transport.close()
            return
        self._head_timer = self.loop.call_later(self.head_seconds, self._head_too_slow)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch_head()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.table is not None:
            self.table.idle(self)
        self._watch_head()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.table is not None:
            self.table.closed(self)
        self._stop_head_timer()
        super().connection_lost(exc)

    # ---- the table's view (engine.server.connection_table.Tracked) -----------------------

    def in_flight(self) -> bool:
        """A request's head has arrived and its answer has not ended (a partial head is not
        a request yet: such a connection may be closed for room). Reads the two attributes
        uvicorn's own graceful ``shutdown`` reads to tell the same."""
        return self.cycle is not None and not self.cycle.response_complete

    def evict(self) -> None:
        """Closed for a newer connection; it was idle, so nothing is cut short."""
        self._stop_head_timer()
        self.transport.close()

    def _watch_head(self) -> None:
        """Time a head that has begun to arrive; stop timing once it is complete."""
        if self.conn.their_state is not h11.IDLE:
            self._stop_head_timer()  # the head is in
        elif self.conn.trailing_data[0]:
            if self._head_timer is None:  # a later request's head has begun
                self._head_timer = self.loop.call_later(self.head_seconds, self._head_too_slow)
        elif self.cycle is not None:
            self._stop_head_timer()  # idle between requests: the keep-alive timeout's turn

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        logger.info("closing a connection whose request head took over %gs", self.head_seconds)
        self.transport.write(_TIMEOUT_RESPONSE)
        self.transport.close()


def guarded_protocol(head_seconds: float, table: ConnectionTable) -> type[TimedH11Protocol]:
    """A :class:`TimedH11Protocol` class with its own head deadline and connection table
    (uvicorn wants a class, and builds one instance per connection)."""
    attributes = {"head_seconds": head_seconds, "table": table}
    return type("TimedH11Protocol", (TimedH11Protocol,), attributes)
