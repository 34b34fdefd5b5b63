"""Process memory (the app plus every engine worker) and a short history for the sparkline.

Qt-free. :func:`sample_memory` asks psutil for a few resident set sizes (the app's and one
per loaded model's worker), which takes tens of microseconds each, so the status strip may call it on the GUI thread once a second.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

HISTORY_SECONDS = 5 * 60


@dataclass(frozen=True)
class MemorySample:
    """Resident memory of the app process and of every engine worker together (0 when none
    runs); ``workers`` says how many were measured (one per loaded model)."""

    app_bytes: int
    engine_bytes: int
    workers: int = 0

    @property
    def total_bytes(self) -> int:
        return self.app_bytes + self.engine_bytes


def sample_memory(worker_pids: Iterable[int]) -> MemorySample:
    """Resident memory of this process and of each of ``worker_pids`` still running (every
    loaded model has a worker process of its own: measuring one undercounts)."""
    app = psutil.Process(os.getpid()).memory_info().rss
    engine = workers = 0
    for pid in set(worker_pids):
        try:
            engine += psutil.Process(pid).memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        workers += 1
    return MemorySample(app_bytes=int(app), engine_bytes=int(engine), workers=workers)


class History:
    """Timestamped values over the last ``seconds`` (for a sparkline).

    Threading: used by one thread.
    """

    def __init__(self, seconds: float = HISTORY_SECONDS) -> None:
        self.seconds = seconds
        self._points: deque[tuple[float, float]] = deque()

    def add(self, value: float, at: float | None = None) -> None:
        now = time.monotonic() if at is None else at
        self._points.append((now, value))
        while self._points and now - self._points[0][0] > self.seconds:
            self._points.popleft()

    def values(self) -> list[float]:
        return [value for _, value in self._points]

    @property
    def latest(self) -> float | None:
        return self._points[-1][1] if self._points else None


def format_bytes(size: float) -> str:
    """``512 MB``, ``1.4 GB``: memory as the status strip shows it."""
    if size >= 1024**3:
        return f"{size / 1024**3:.1f} GB"
    return f"{size / 1024**2:.0f} MB"
