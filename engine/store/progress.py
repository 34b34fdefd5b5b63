"""Progress reports for long store jobs (downloads, conversions, imports) and cancellation.

A job calls a :data:`ProgressCallback` from its own thread; a GUI must hop to its main
thread before touching widgets. Cancelling is cooperative: the caller sets a
``threading.Event`` and the job raises :class:`~engine.store.errors.Cancelled` at its next
check (for downloads that is the next chunk, a few kilobytes later).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from engine.store.errors import Cancelled


@dataclass(frozen=True)
class Progress:
    """One snapshot of a job's progress."""

    phase: str  # e.g. "listing", "downloading", "verifying", "converting", "done"
    done: int = 0  # bytes (or steps) done
    total: int = 0  # 0 when unknown
    speed: float = 0.0  # bytes per second, smoothed over the last few seconds
    item: str | None = None  # the file being worked on
    message: str = ""

    @property
    def fraction(self) -> float | None:
        return min(1.0, self.done / self.total) if self.total else None

    @property
    def eta_seconds(self) -> float | None:
        if not self.total or self.speed <= 0:
            return None
        return max(0.0, (self.total - self.done) / self.speed)


ProgressCallback = Callable[[Progress], None]


def check_cancel(cancel: threading.Event | None) -> None:
    """Raise :class:`Cancelled` when ``cancel`` is set."""
    if cancel is not None and cancel.is_set():
        raise Cancelled("cancelled")


class ByteMeter:
    """Counts bytes, measures speed over a sliding window and reports at a bounded rate.

    Threading: used by the one thread that runs the job.
    """

    def __init__(
        self,
        total: int,
        callback: ProgressCallback | None,
        cancel: threading.Event | None,
        *,
        done: int = 0,
        window: float = 3.0,
        interval: float = 0.2,
    ) -> None:
        self.total = total
        self.done = done
        self.item: str | None = None
        self.phase = "downloading"  # what advance() reports (an import's hash: "verifying")
        self._callback = callback
        self._cancel = cancel
        self._window = window
        self._interval = interval
        self._samples: deque[tuple[float, int]] = deque([(time.monotonic(), done)])
        self._last_report = 0.0

    @property
    def speed(self) -> float:
        (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0

    def advance(self, n: int) -> None:
        """Record ``n`` more bytes; raises Cancelled if the job was cancelled."""
        check_cancel(self._cancel)
        self.done += n
        now = time.monotonic()
        self._samples.append((now, self.done))
        while len(self._samples) > 2 and now - self._samples[0][0] > self._window:
            self._samples.popleft()
        if now - self._last_report >= self._interval:
            self._last_report = now
            self.report(self.phase)

    def report(self, phase: str, message: str = "") -> None:
        if self._callback is not None:
            self._callback(
                Progress(
                    phase=phase,
                    done=self.done,
                    total=self.total,
                    speed=self.speed,
                    item=self.item,
                    message=message,
                )
            )
