"""Logging set-up: a rotating file in the log folder, plus stderr when there is one.

A windowed (frozen) build has no stdout/stderr, so the file is the record that always exists.
Each line is bounded (:data:`engine.echo.LOG_LINE_BYTES`, clipped with a visible
marker): a message repeating a 20 MB request would otherwise rotate the whole history away.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path

from engine.echo import LOG_LINE_BYTES, clip

LOG_FILE_NAME = "sidelight.log"
ENGINE_LOG_FILE_NAME = "engine.log"
_FORMAT = "%(asctime)s %(levelname)-7s %(processName)s %(name)s: %(message)s"


class BoundedLines(logging.Filter):
    """Clip a record's message to :data:`LOG_LINE_BYTES` (its traceback, if any, is kept).

    Threading: logging calls filters under the handler's lock; this keeps no state.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if len(message) * 4 > LOG_LINE_BYTES:
            clipped = clip(message, LOG_LINE_BYTES)
            if clipped != message:
                record.msg, record.args = clipped, None
        return True


def setup_logging(
    log_dir: Path, level: str = "INFO", *, console: bool = True, file_name: str = LOG_FILE_NAME
) -> Path:
    """Route the root logger to ``log_dir/file_name`` (rotating) and to stderr.

    Each process gets its own file (rotation is not safe across processes).

    Returns:
        The log file path.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    log_file = log_dir / file_name
    root = logging.getLogger()
    root.setLevel(level.upper())
    for handler in list(root.handlers):
        if getattr(handler, "_sidelight", False):
            root.removeHandler(handler)
            handler.close()
    file_handler = logging.handlers.RotatingFileHandler(
        log_file, maxBytes=5 * 1024 * 1024, backupCount=3, encoding="utf-8"
    )
    file_handler.setFormatter(logging.Formatter(_FORMAT))
    file_handler.addFilter(BoundedLines())
    file_handler._sidelight = True  # type: ignore[attr-defined]
    root.addHandler(file_handler)
    if console and sys.stderr is not None:
        stream = logging.StreamHandler(sys.stderr)
        stream.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)-7s %(message)s", "%H:%M:%S")
        )
        stream.addFilter(BoundedLines())
        stream._sidelight = True  # type: ignore[attr-defined]
        root.addHandler(stream)
    return log_file
