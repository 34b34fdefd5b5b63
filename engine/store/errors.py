"""Errors the model store raises; every message is meant to be shown to a person as is.

Disk failures (a full disk, a read-only or foreign-owned models folder) surface as
``OSError`` from deep inside a job; :func:`disk_errors` turns them into one sentence that
says what failed and what to do, so the CLI and the desktop app show the same message.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

OTHER_MODELS_FOLDER = (
    "choose another models folder (SIDELIGHT_MODELS_DIR, or models_dir in the settings file)"
)


class StoreError(Exception):
    """A store operation failed; the message says why and, where possible, what to do."""


class InvalidModelId(StoreError, ValueError):
    """An id that could name something outside the models folder (or is malformed)."""


class ModelNotFound(StoreError, LookupError):
    """No complete model with this id is in the store."""


class Cancelled(StoreError):
    """The job was cancelled; whatever it wrote is kept for resuming or was removed."""


class NotEnoughSpace(StoreError, OSError):
    """The disk cannot hold what a job is about to write; nothing was written."""


class HubError(StoreError):
    """The model hub refused or could not be reached; the message names the cause."""


class ModelDamaged(StoreError):
    """A model folder whose manifest or files cannot be trusted; ``sidelight rm`` removes it."""

    def __init__(self, model_id: str, reason: str) -> None:
        super().__init__(
            f"model '{model_id}' is damaged: {reason} (remove it with: sidelight rm {model_id})"
        )
        self.model_id = model_id
        self.reason = reason


def disk_error(
    exc: OSError,
    doing: str,
    where: Path | None = None,
    remedy: str = OTHER_MODELS_FOLDER,
) -> StoreError:
    """One sentence for an ``OSError`` met while ``doing`` (``"importing model.gguf"``).

    Args:
        where: the folder being written, named when the error names no file (a failed
            ``write`` does not).
        remedy: what to do about a read-only or foreign-owned folder.
    """
    named = exc.filename if exc.filename is not None else where
    where_text = str(named) if named is not None else "the models folder"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return NotEnoughSpace(
            f"{doing} failed: the disk holding {where_text} is full; free some space and try again"
        )
    if exc.errno == errno.EROFS:
        return StoreError(f"{doing} failed: {where_text} is on a read-only disk; {remedy}")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return StoreError(
            f"{doing} failed: permission denied for {where_text}; make it writable for your user "
            f"or {remedy}"
        )
    return StoreError(f"{doing} failed: {exc.strerror or exc} ({where_text})")


@contextmanager
def disk_errors(doing: str, where: Path | None = None) -> Iterator[None]:
    """Re-raise a disk ``OSError`` in the block as :func:`disk_error`'s StoreError."""
    try:
        yield
    except StoreError:
        raise  # already a sentence (NotEnoughSpace is an OSError too)
    except OSError as exc:
        if not is_disk_error(exc):
            raise  # e.g. an HTTP error (requests' errors are OSErrors without an errno)
        raise disk_error(exc, doing, where) from exc


def is_disk_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the file system's failure (it carries an errno), not a library's."""
    return isinstance(exc, OSError) and exc.errno is not None
