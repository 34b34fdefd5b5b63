"""The last lines of Sidelight's log, kept in memory for the server view's live log.

:class:`LogTail` is a logging handler on the root logger (installed once, when the app's
controller starts): every record the log file gets is also kept here, the last
:data:`MAX_LINES` of them, numbered, so a window shows the log live by asking for the lines
after the last one it showed. Nothing is written anywhere.

Threading: records arrive on any thread (the server's, the engine's, pool threads); the
lines are read on the GUI thread; a lock guards the buffer. Qt-free.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Final

MAX_LINES: Final = 2000
FORMAT: Final = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


class LogTail(logging.Handler):
    """The newest log lines, each with its number (counting from 1)."""

    def __init__(self, max_lines: int = MAX_LINES) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(logging.Formatter(FORMAT, "%H:%M:%S"))
        self._lines: deque[tuple[int, str]] = deque(maxlen=max_lines)
        self._count = 0
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception:  # a bad format argument must not break the caller's log call
            self.handleError(record)
            return
        with self._guard:
            self._count += 1
            self._lines.append((self._count, text))

    @property
    def last(self) -> int:
        """The number of the newest line (0 before the first)."""
        with self._guard:
            return self._count

    def lines_after(self, number: int) -> list[tuple[int, str]]:
        """The kept lines newer than line ``number``, oldest first."""
        with self._guard:
            return [line for line in self._lines if line[0] > number]


_TAIL: Final = LogTail()
_install_lock = threading.Lock()


def log_tail() -> LogTail:
    """The app's tail, on the root logger (added on the first call)."""
    root = logging.getLogger()
    with _install_lock:
        if _TAIL not in root.handlers:
            root.addHandler(_TAIL)
    return _TAIL
