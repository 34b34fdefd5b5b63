"""Move the model store from its old place (the cache folder) to the data folder.

Atomic per model and resumable: each model folder is either renamed (same filesystem,
``os.replace``, instant) or copied to ``.relocating/<id>`` in the new place, fsynced, its
sizes verified, renamed into place, and only then deleted from the old place. A crash
leaves every model in the old or the new place; the next start finishes the move (a stale
``.relocating`` copy is discarded and redone).

A copy across filesystems can take minutes for a large store, so callers may run it on a
background thread, follow it through ``report`` (models and bytes done) and stop it with
``cancel``: a stop between files discards the half-done copy of the current model, which
stays in the old place, as do the models not reached yet; the next call resumes.

Threading: one call at a time (not thread-safe), on any thread; ``report`` and ``progress``
are called on that thread, ``cancel`` may be set from any thread.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.settings import Paths

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
"""Called with (bytes done, bytes total) after each model and, across filesystems, each chunk."""

_STAGING = ".relocating"
_CHUNK = 8 << 20  # bytes copied between progress reports and cancel checks


@dataclass(frozen=True)
class MoveProgress:
    """Where a move stands: ``models_done`` of ``models_total`` models, bytes likewise."""

    models_done: int
    models_total: int
    bytes_done: int
    bytes_total: int


Report = Callable[[MoveProgress], None]


class MoveCancelled(Exception):
    """The move was stopped through ``cancel``; what is not moved stays in the old place."""


def models_to_move(old: Path) -> list[Path]:
    """The complete models (folders with ``manifest.json``) in ``old``, in move order."""
    if not old.is_dir():
        return []
    return sorted(p for p in old.iterdir() if (p / "manifest.json").is_file())


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _fsync_tree(folder: Path) -> None:
    for f in folder.rglob("*"):
        if f.is_file():
            with open(f, "rb") as handle:
                os.fsync(handle.fileno())


def relocate_store(
    old: Path,
    new: Path,
    progress: Progress | None = None,
    *,
    report: Report | None = None,
    cancel: threading.Event | None = None,
) -> int:
    """Move every complete model (folder with ``manifest.json``) from ``old`` to ``new``.

    Returns the number of models moved. A model already present in ``new`` is left in
    ``old`` and logged, never overwritten. ``report`` hears (models, bytes) done after each
    model and each copied chunk, starting with nothing done.

    Raises:
        OSError: a copy failed; the models not yet moved stay in ``old`` (the next call
            resumes).
        MoveCancelled: ``cancel`` was set; likewise.
    """
    if not old.is_dir() or old.resolve() == new.resolve():
        return 0
    models = models_to_move(old)
    total = sum(_size(m) for m in models)
    done = 0
    moved = 0
    new.mkdir(parents=True, exist_ok=True)
    staging = new / _STAGING
    if models:
        logger.info("moving %d models (%d bytes) from %s to %s", len(models), total, old, new)

    def tell(models_done: int, bytes_done: int) -> None:
        if report is not None:
            report(MoveProgress(models_done, len(models), bytes_done, total))

    tell(0, 0)
    for index, model in enumerate(models):
        if cancel is not None and cancel.is_set():
            raise MoveCancelled(f"stopped before {model.name}")
        target = new / model.name
        size = _size(model)
        if target.exists():
            logger.warning("not moving %s: %s already exists", model, target)
            done += size
            tell(index + 1, done)
            continue
        try:
            os.replace(model, target)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            start = done

            def copied(count: int, start: int = start, index: int = index) -> None:
                if progress is not None:
                    progress(start + count, total)
                tell(index, start + count)

            _copy_across(model, target, staging / model.name, size, copied, cancel)
        done += size
        moved += 1
        if progress is not None:
            progress(done, total)
        tell(index + 1, done)
    if staging.is_dir() and not any(staging.iterdir()):
        staging.rmdir()
    return moved


def _copy_across(
    model: Path,
    target: Path,
    temp: Path,
    size: int,
    copied: Callable[[int], None] | None = None,
    cancel: threading.Event | None = None,
) -> None:
    """Copy to a temp name in the new place, fsync, verify, rename, then delete the old.

    ``copied(bytes so far)`` is called after each chunk. On ``cancel`` the temp copy is
    removed and :class:`MoveCancelled` raised: the model stays whole in the old place.
    """
    if temp.exists():
        shutil.rmtree(temp)  # a copy a crash left half done: redo it
    temp.parent.mkdir(parents=True, exist_ok=True)
    count = [0]

    def copy_file(src: str, dst: str) -> str:
        with open(src, "rb") as reader, open(dst, "wb") as writer:
            while chunk := reader.read(_CHUNK):
                if cancel is not None and cancel.is_set():
                    raise MoveCancelled(f"stopped while copying {model.name}")
                writer.write(chunk)
                count[0] += len(chunk)
                if copied is not None:
                    copied(count[0])
        shutil.copystat(src, dst)
        return dst

    try:
        shutil.copytree(model, temp, copy_function=copy_file)
    except MoveCancelled:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    _fsync_tree(temp)
    copied_size = _size(temp)
    if copied_size != size:
        shutil.rmtree(temp)
        raise OSError(f"copy of {model} has {copied_size} bytes, expected {size}")
    os.replace(temp, target)
    shutil.rmtree(model)


def relocate_at_start(
    paths: Paths,
    progress: Progress | None = None,
    *,
    report: Report | None = None,
    cancel: threading.Event | None = None,
) -> OSError | None:
    """Finish moving a store left in the old place; log progress and errors, never raise.

    Returns the error that stopped the move (``None`` when it finished or was cancelled).
    A failed or cancelled move leaves the models not yet moved in the old place; the next
    start resumes.
    """
    if paths.legacy_models_dir is None:
        return None
    logged = [-1]

    def log_progress(done: int, total: int) -> None:
        if done >> 28 != logged[0] or done == total:  # every 256 MB and at the end
            logged[0] = done >> 28
            logger.info("moving models to the data folder: %d of %d MB", done >> 20, total >> 20)
        if progress is not None:
            progress(done, total)

    try:
        relocate_store(
            paths.legacy_models_dir, paths.models_dir, log_progress, report=report, cancel=cancel
        )
    except MoveCancelled as exc:
        logger.info("moving models paused (%s); the next start resumes", exc)
    except OSError as exc:
        logger.error("could not finish moving models (the next start resumes): %s", exc)
        return exc
    return None


def pending_move(paths: Paths) -> bool:
    """Whether a store in the old place waits to be moved (cheap: one folder listing)."""
    old = paths.legacy_models_dir
    if old is None or not old.is_dir():
        return False
    try:
        if old.resolve() == paths.models_dir.resolve():
            return False
        return bool(models_to_move(old))
    except OSError:
        return True  # unreadable: let the move try, and say what failed
