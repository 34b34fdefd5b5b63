"""``ModelStore``: the complete models under the models folder, one folder each.

Layout (``settings.paths.models_dir``)::

    <id>/manifest.json     written last; a folder without it is not a model
    <id>/...               the IR files, or the .gguf file the manifest names
    .partial/<id>/         jobs in progress (downloads resume from here)
    .trash/                folders being deleted (renamed here first, then removed)
    .locks/<id>.lock       one job per id at a time, across processes

A job builds its folder under ``.partial`` and calls :meth:`ModelStore.commit`, which
writes the manifest and renames the folder into place: a model appears whole or not at all.

Threading: a ``ModelStore`` holds no mutable state beyond its root path; every method reads
the disk, so one instance may be shared by threads and processes. Cross-process exclusion
for jobs comes from :meth:`ModelStore.lock`.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from engine.models import ModelError, ModelSpec, spec_from_path
from engine.settings import Settings
from engine.store.errors import InvalidModelId, ModelNotFound, StoreError
from engine.store.ids import RESERVED, inside, model_folder, normalize_id
from engine.store.manifest import MANIFEST, Manifest, read_manifest, write_manifest

logger = logging.getLogger(__name__)

PARTIAL = ".partial"
TRASH = ".trash"
LOCKS = ".locks"


@dataclass(frozen=True)
class StoredModel:
    """A complete model in the store: its manifest and where it lives."""

    manifest: Manifest
    folder: Path

    @property
    def id(self) -> str:
        return self.manifest.id

    @property
    def path(self) -> Path:
        """What to load: the IR folder, or the .gguf file inside the model folder."""
        return inside(self.folder, self.manifest.entry)

    def spec(self) -> ModelSpec:
        """The engine's description of this model (reads the files again).

        Raises:
            ModelError: the files on disk no longer form a servable model.
        """
        return spec_from_path(self.path, model_id=self.id)

    def describe(self) -> dict[str, Any]:
        """JSON-ready summary for ``sidelight list --json`` and ``/v1/models``."""
        data = self.manifest.to_dict()
        data.pop("schema", None)
        data["path"] = str(self.path)
        return data


class ModelStore:
    """List, inspect, add and delete models under one root folder."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def from_settings(cls, settings: Settings) -> ModelStore:
        return cls(settings.paths.models_dir)

    # -- reading -------------------------------------------------------------------------

    def list(self) -> list[StoredModel]:
        """Every complete model, sorted by id. Folders without a valid manifest are skipped."""
        if not self.root.is_dir():
            return []
        models = []
        for folder in sorted(self.root.iterdir()):
            if folder.name in RESERVED or folder.name.startswith(".") or folder.is_symlink():
                continue
            if not (folder / MANIFEST).is_file():
                continue
            try:
                models.append(self.get(folder.name))
            except StoreError as exc:
                logger.warning("skipping %s: %s", folder, exc)
        return models

    def get(self, model_id: str) -> StoredModel:
        """The model with this id.

        Raises:
            InvalidModelId: the id is path-like or malformed.
            ModelNotFound: no complete model has this id.
        """
        folder = model_folder(self.root, model_id)
        if not (folder / MANIFEST).is_file():
            raise ModelNotFound(f"no model '{model_id}' in the store (see: sidelight list)")
        manifest = read_manifest(folder)
        if manifest.id != folder.name:
            raise StoreError(f"{folder}: manifest id {manifest.id!r} does not match its folder")
        return StoredModel(manifest=manifest, folder=folder)

    def contains(self, model_id: str) -> bool:
        try:
            self.get(model_id)
        except ModelNotFound:
            return False
        return True

    def spec(self, model_id: str) -> ModelSpec:
        """The ModelSpec of a stored model, by id only (never a path): for HTTP requests.

        Raises:
            InvalidModelId, ModelNotFound: as :meth:`get`.
            ModelError: the stored files are not servable.
        """
        return self.get(model_id).spec()

    def resolve(self, id_or_path: str | Path) -> ModelSpec:
        """A ModelSpec for a store id or a filesystem path (for the command line).

        A valid id present in the store wins; otherwise an existing path is used.

        Raises:
            ModelError: neither a stored model nor a servable path.
        """
        text = str(id_or_path)
        try:
            return self.spec(text)
        except (InvalidModelId, ModelNotFound):
            pass
        except StoreError as exc:
            raise ModelError(str(exc)) from exc
        path = Path(text).expanduser()
        if path.exists():
            return spec_from_path(path)
        raise ModelError(
            f"'{text}' is neither a model in the store (see: sidelight list) nor a path"
        )

    # -- writing -------------------------------------------------------------------------

    def partial_folder(self, model_id: str) -> Path:
        """Where a job builds the model with this id (kept across crashes for resuming)."""
        folder = model_folder(self.root / PARTIAL, model_id)
        folder.parent.mkdir(parents=True, exist_ok=True)
        return folder

    @contextmanager
    def lock(self, model_id: str) -> Iterator[None]:
        """Hold the cross-process lock for jobs on ``model_id`` (use with ``with``).

        Raises:
            StoreError: another job (in any process) holds it.
        """
        canonical = normalize_id(model_id)
        locks = self.root / LOCKS
        locks.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(locks / f"{canonical}.lock"), timeout=0.5)
        try:
            lock.acquire()
        except Timeout as exc:
            raise StoreError(
                f"another job is already working on '{canonical}' (wait for it or cancel it)"
            ) from exc
        try:
            yield
        finally:
            lock.release()

    def commit(self, staged: Path, manifest: Manifest) -> StoredModel:
        """Write the manifest into ``staged`` and move it into place as ``manifest.id``.

        Raises:
            StoreError: a model with this id is already there.
        """
        target = model_folder(self.root, manifest.id)
        if target.exists():
            raise StoreError(f"a model '{manifest.id}' is already in the store")
        write_manifest(staged, manifest)
        os.replace(staged, target)
        _fsync_dir(self.root)
        logger.info("added %s to the store (%d bytes)", manifest.id, manifest.size_bytes)
        return StoredModel(manifest=manifest, folder=target)

    def remove(self, model_id: str) -> None:
        """Delete a model. It disappears at once (renamed away), then its files go.

        Raises:
            InvalidModelId, ModelNotFound: as :meth:`get`.
        """
        model = self.get(model_id)
        trash = self.root / TRASH
        trash.mkdir(parents=True, exist_ok=True)
        doomed = trash / f"{model.id}-{uuid.uuid4().hex[:8]}"
        os.replace(model.folder, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
        logger.info("removed %s from the store", model.id)

    def has_partial(self, model_id: str) -> bool:
        """Whether an unfinished job left files for ``model_id`` (a download can resume)."""
        return model_folder(self.root / PARTIAL, model_id).exists()

    def discard_partial(self, model_id: str) -> None:
        """Forget a job's unfinished files (a cancelled conversion, an abandoned download)."""
        folder = model_folder(self.root / PARTIAL, model_id)
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)


def _fsync_dir(folder: Path) -> None:
    if os.name == "nt":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
