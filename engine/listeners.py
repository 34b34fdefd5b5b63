"""``Listeners``: a list of callbacks with an undo each, called with one failure never
stopping the others.

The scheduler's changes, the unload log and the default model's status each tell whoever
listens (the tray, ``/health``'s views); this is their one registry.

Threading: safe on any thread. Its own lock is a leaf, held only to copy or change the
list: callbacks run outside it, on the thread that emits, and must not block.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Generic, ParamSpec

logger = logging.getLogger(__name__)

P = ParamSpec("P")


class Listeners(Generic[P]):
    """Callbacks taking ``P``; ``what`` names them in the log when one fails."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._lock = threading.Lock()
        self._callbacks: list[Callable[P, None]] = []

    def add(self, callback: Callable[P, None]) -> Callable[[], None]:
        """Call ``callback`` on every :meth:`emit` from now on; returns an undo."""
        with self._lock:
            self._callbacks.append(callback)

        def remove() -> None:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)

        return remove

    def emit(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Call every callback; one that raises is logged, the others still run."""
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            try:
                callback(*args, **kwargs)
            except Exception:
                logger.exception("%s listener failed", self._what)
