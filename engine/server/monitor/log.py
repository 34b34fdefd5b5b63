"""The request inspector's memory: the last N finished requests and the running ones.

Bounded twice: at most ``capacity`` entries, and at most ``body_budget`` characters of
kept bodies (the oldest bodies go first; their entries stay). Nothing here touches the disk.

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


class RequestLog:
    def __init__(
        self, capacity: int = DEFAULT_CAPACITY, body_budget: int = DEFAULT_BODY_BUDGET
    ) -> None:
        self.capacity = capacity
        self.body_budget = body_budget
        self._lock = threading.Lock()
        self._entries: deque[RequestEntry] = deque()
        self._running: dict[int, OpenRequest] = {}  # by id(), in the order they started
        self._last_id = 0
        self._body_bytes = 0

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
            while len(self._entries) > self.capacity:
                self._body_bytes -= _size(self._entries.popleft())
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
