"""Which open connections the server keeps when there are too many (issue 25).

uvicorn's ``limit_concurrency`` counted sockets: 64 idle ones, opened and never used by any
process on the machine, made every request (``/health`` too) a 503. Requests are now
capped where they run (:mod:`engine.server.request_limit`); sockets are capped only as a
backstop for file descriptors and memory, and never by turning away the newcomer while an
idle socket holds a place:

- at most :data:`MAX_OPEN` open connections (fewer under a low descriptor limit,
  :func:`open_cap`): a new one beyond that closes the connection idle the longest that has
  no request in flight, so a flood of idle sockets ages out as fast as real clients come;
- at most :data:`MAX_PER_PEER` from one remote address, enforced the same way among that
  address's own connections, so one machine on the network cannot take the whole table.
  Loopback is exempt (every local app, IDE plugins, the chat, scripts, shares that one
  address) but counts toward :data:`MAX_OPEN`.

Only when every candidate is answering a request is the newcomer turned away. "Idle" runs
from the connection's opening or its last answer, not its last byte, so a client trickling a
request head ages like a silent one (and the head deadline, :mod:`engine.server.connection`,
closes both).

Threading: the server's event loop only (the protocol calls it), so no lock.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Protocol

from engine.server.auth import is_loopback_address

logger = logging.getLogger(__name__)

# Far above what local clients use (IDE plugins, a chat window and scripts keep a handful
# each; in-flight requests are capped at 64) and far below the 1,024 descriptors a Linux
# process gets by default: each socket costs one descriptor and at most h11's 16 KiB of
# buffered head, so 256 of them hold 4 MiB at worst.
MAX_OPEN = 256
# One remote machine may open as many sockets as the server runs requests: enough for a
# busy client's pool, a quarter of the table, so three others still find room.
MAX_PER_PEER = 64
_REPORT_SECONDS = 60.0  # evictions are logged at most once a minute (a flood is thousands)


class Tracked(Protocol):
    """A connection as the table sees it (the HTTP protocol object)."""

    def in_flight(self) -> bool:
        """Whether a request on it is being answered (then it is never closed for room)."""
        ...

    def evict(self) -> None:
        """Close it now, to make room for a newer connection."""
        ...


def open_cap() -> int:
    """:data:`MAX_OPEN`, or half the process's soft descriptor limit when that is lower
    (macOS shells start programs with 256): the engine's pipes, model files and logs need
    the rest."""
    try:
        import resource
    except ImportError:  # Windows: sockets are not counted against such a limit
        return MAX_OPEN
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_OPEN
    return max(16, min(MAX_OPEN, soft // 2))


class ConnectionTable:
    """The open connections, idle-longest first, overall and per remote address."""

    def __init__(self, max_open: int | None = None, max_per_peer: int = MAX_PER_PEER) -> None:
        self.max_open = open_cap() if max_open is None else max_open
        self.max_per_peer = max_per_peer
        self.evicted = 0  # connections closed to make room, since the start
        self.refused = 0  # newcomers turned away (every candidate was answering a request)
        self._order: OrderedDict[Tracked, str | None] = OrderedDict()  # -> its capped peer
        self._peers: dict[str, OrderedDict[Tracked, None]] = {}
        self._next_report = 0.0

    def __len__(self) -> int:
        return len(self._order)

    def peer_count(self, peer: str) -> int:
        """Open connections from ``peer`` (0 for loopback, which is not counted per peer)."""
        return len(self._peers.get(peer, ()))

    def admit(self, conn: Tracked, peer: str | None) -> bool:
        """Make room for ``conn`` from ``peer`` (its IP address; None when unknown) and add it;
        False when there is no room (the caller closes it)."""
        capped = None if peer is None or is_loopback_address(peer) else peer
        if capped is not None:
            mine = self._peers.get(capped)
            if mine is not None and len(mine) >= self.max_per_peer and not self._evict(mine):
                return self._refuse(f"{capped} has {len(mine)} connections answering requests")
        if len(self._order) >= self.max_open and not self._evict(self._order):
            return self._refuse(f"all {len(self._order)} connections are answering requests")
        self._order[conn] = capped
        if capped is not None:
            self._peers.setdefault(capped, OrderedDict())[conn] = None
        return True

    def idle(self, conn: Tracked) -> None:
        """``conn`` finished an answer: it is now the most recently idle."""
        if conn in self._order:
            self._order.move_to_end(conn)
            peer = self._order[conn]
            if peer is not None:
                self._peers[peer].move_to_end(conn)

    def closed(self, conn: Tracked) -> None:
        """``conn`` is gone (any number of times: eviction removes it before its close)."""
        peer = self._order.pop(conn, None)
        if peer is not None:
            mine = self._peers[peer]
            mine.pop(conn, None)
            if not mine:
                del self._peers[peer]

    def _evict(self, order: Iterable[Tracked]) -> bool:
        """Close the first connection in ``order`` with no request in flight, if any."""
        victim = next((conn for conn in order if not conn.in_flight()), None)
        if victim is None:
            return False
        self.closed(victim)
        self.evicted += 1
        victim.evict()
        self._report("closed the longest-idle connection to make room for a new one")
        return True

    def _refuse(self, why: str) -> bool:
        self.refused += 1
        self._report(f"turned a new connection away: {why}")
        return False

    def _report(self, what: str) -> None:
        now = time.monotonic()
        if now >= self._next_report:
            self._next_report = now + _REPORT_SECONDS
            logger.warning(
                "%s (%d open; since the start %d idle connections closed, %d refused)",
                what,
                len(self._order),
                self.evicted,
                self.refused,
            )
