"""Move the model store from its old place (the cache folder) to the data folder.

Atomic per model and resumable: each model folder is either renamed (same filesystem,
``os.replace``, instant) or copied to ``.relocating/<id>`` in the new place, fsynced, its
sizes verified, renamed into place, and only then deleted from the old place. A crash
leaves every model in the old or the new place; the next start finishes the move (a stale
``.relocating`` copy is discarded and redone).

Threading: call once at startup, before a ``ModelStore`` serves requests; not thread-safe.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from engine.settings import Paths

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
"""Called with (bytes done, bytes total) as the move proceeds."""

_STAGING = ".relocating"


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _fsync_tree(folder: Path) -> None:
    for f in folder.rglob("*"):
        if f.is_file():
            with open(f, "rb") as handle:
                os.fsync(handle.fileno())


def relocate_store(old: Path, new: Path, progress: Progress | None = None) -> int:
    """Move every complete model (folder with ``manifest.json``) from ``old`` to ``new``.

    Returns the number of models moved. A model already present in ``new`` is left in
    ``old`` and logged, never overwritten. Raises ``OSError`` if a copy fails; the models
    not yet moved stay in ``old`` and the next call resumes.
    """
    if not old.is_dir() or old.resolve() == new.resolve():
        return 0
    models = sorted(p for p in old.iterdir() if (p / "manifest.json").is_file())
    total = sum(_size(m) for m in models)
    done = 0
    moved = 0
    new.mkdir(parents=True, exist_ok=True)
    staging = new / _STAGING
    if models:
        logger.info("moving %d models (%d bytes) from %s to %s", len(models), total, old, new)
    for model in models:
        target = new / model.name
        size = _size(model)
        if target.exists():
            logger.warning("not moving %s: %s already exists", model, target)
            done += size
            continue
        try:
            os.replace(model, target)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            _copy_across(model, target, staging / model.name, size)
        done += size
        moved += 1
        if progress is not None:
            progress(done, total)
    if staging.is_dir() and not any(staging.iterdir()):
        staging.rmdir()
    return moved


def _copy_across(model: Path, target: Path, temp: Path, size: int) -> None:
    """Copy to a temp name in the new place, fsync, verify, rename, then delete the old."""
    if temp.exists():
        shutil.rmtree(temp)  # a copy a crash left half done: redo it
    temp.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(model, temp)
    _fsync_tree(temp)
    copied = _size(temp)
    if copied != size:
        shutil.rmtree(temp)
        raise OSError(f"copy of {model} has {copied} bytes, expected {size}")
    os.replace(temp, target)
    shutil.rmtree(model)


def relocate_at_start(paths: Paths, progress: Progress | None = None) -> None:
    """Finish moving a store left in the old place; log progress and errors, never raise.

    A failed move leaves the models not yet moved in the old place; the next start resumes.
    """
    if paths.legacy_models_dir is None:
        return

    def log_progress(done: int, total: int) -> None:
        logger.info("moving models to the data folder: %d of %d MB", done >> 20, total >> 20)
        if progress is not None:
            progress(done, total)

    try:
        relocate_store(paths.legacy_models_dir, paths.models_dir, log_progress)
    except OSError as exc:
        logger.error("could not finish moving models (the next start resumes): %s", exc)
