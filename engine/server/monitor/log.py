"""The request inspector's memory: the last N finished requests and the running ones.

Bounded in bytes, not only in entries: at most ``capacity`` entries, at most
``text_budget`` characters in the entries themselves (the oldest entries go first), and at
most ``body_budget`` characters of kept bodies (the oldest bodies go first; their entries
stay). What a client chose (model names, errors, headers) is clipped before it gets here
(:mod:`engine.echo`), so the text budget holds every entry the capacity allows; it is
the guard if a field is ever left unclipped. Nothing here touches the disk.

Threading: every method is safe from any thread (the server's loop adds, the desktop's GUI
thread reads).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import replace

from engine.server.monitor.record import OpenRequest, Outcome, RequestEntry

DEFAULT_CAPACITY = 500
DEFAULT_BODY_BUDGET = 32 * 1024 * 1024
DEFAULT_TEXT_BUDGET = 8 * 1024 * 1024
# What an entry costs besides its texts (the object, its numbers, its replay tuple), roughly.
ENTRY_OVERHEAD = 1024


class RequestLog:
    def __init__(
        self,
        capacity: int = DEFAULT_CAPACITY,
        body_budget: int = DEFAULT_BODY_BUDGET,
        text_budget: int = DEFAULT_TEXT_BUDGET,
    ) -> None:
        self.capacity = capacity
        self.body_budget = body_budget
        self.text_budget = text_budget
        self._lock = threading.Lock()
        self._entries: deque[RequestEntry] = deque()
        self._running: dict[int, OpenRequest] = {}  # by id(), in the order they started
        self._last_id = 0
        self._body_bytes = 0
        self._text_bytes = 0

    @property
    def text_bytes(self) -> int:
        """What the finished entries hold besides their bodies (characters, with
        :data:`ENTRY_OVERHEAD` each)."""
        with self._lock:
            return self._text_bytes

    @property
    def body_bytes(self) -> int:
        """Characters of kept bodies."""
        with self._lock:
            return self._body_bytes

    @property
    def last_id(self) -> int:
        with self._lock:
            return self._last_id

    def started(self, request: OpenRequest) -> None:
        with self._lock:
            self._running[id(request)] = request

    def finished(
        self, request: OpenRequest, status: int, outcome: Outcome, body: str | None
    ) -> RequestEntry:
        """Log ``request`` as ended; returns its entry (with its id)."""
        with self._lock:
            self._running.pop(id(request), None)
            self._last_id += 1
            entry = request.snapshot(id=self._last_id, status=status, outcome=outcome, body=body)
            self._entries.append(entry)
            self._body_bytes += _size(entry)
            self._text_bytes += text_size(entry)
            while self._entries and (
                len(self._entries) > self.capacity or self._text_bytes > self.text_budget
            ):
                gone = self._entries.popleft()
                self._body_bytes -= _size(gone)
                self._text_bytes -= text_size(gone)
            self._trim_bodies()
            return entry

    def entries(self, since: int = 0) -> list[RequestEntry]:
        """Finished requests with an id above ``since``, oldest first."""
        with self._lock:
            if since <= 0:
                return list(self._entries)
            return [e for e in self._entries if e.id > since]

    def running(self) -> list[RequestEntry]:
        """Requests still being served, oldest first (id 0, no outcome yet)."""
        with self._lock:
            requests = list(self._running.values())
        return [r.snapshot() for r in requests]

    def drop_bodies(self) -> None:
        """Forget every kept body (the person turned keeping them off)."""
        with self._lock:
            self._entries = deque(replace(e, body=None) if e.body else e for e in self._entries)
            self._body_bytes = 0
        self._text_bytes = 0

    def _trim_bodies(self) -> None:
        """Drop the oldest bodies until the kept ones fit the budget (lock held)."""
        if self._body_bytes <= self.body_budget:
            return
        for index, entry in enumerate(self._entries):
            if entry.body is not None:
                self._body_bytes -= _size(entry)
                self._entries[index] = replace(entry, body=None)
                if self._body_bytes <= self.body_budget:
                    return


def _size(entry: RequestEntry) -> int:
    return len(entry.body) if entry.body is not None else 0


def text_size(entry: RequestEntry) -> int:
    """What ``entry`` holds besides its body: its texts (characters) and the overhead."""
    texts = (
        entry.dialect,
        entry.method,
        entry.route,
        entry.user_agent,
        entry.requested_model,
        entry.model,
        entry.error,
    )
    size = ENTRY_OVERHEAD + sum(len(text) for text in texts if text)
    if entry.replay is not None:
        size += len(entry.replay.url) + sum(len(n) + len(v) for n, v in entry.replay.headers)
    return size
