"""``ModelStore``: the complete models under the models folder, one folder each.

Layout (``settings.paths.models_dir``)::

    <id>/manifest.json     written last; a folder without it is not a model
    <id>/...               the IR files, or the .gguf file the manifest names
    .partial/<id>/         jobs in progress (downloads resume from here)
    .trash/                folders being deleted (renamed here first, then removed)
    .locks/<id>.lock       one job per id at a time, across processes

A job builds its folder under ``.partial`` and calls :meth:`ModelStore.commit`, which
writes the manifest and renames the folder into place: a model appears whole or not at all.

Threading: a ``ModelStore`` holds no mutable state beyond its root path and the (locked) set
of damaged entries it has logged; every method reads the disk, so one instance may be shared
by threads and processes. Cross-process exclusion
for jobs comes from :meth:`ModelStore.lock`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from engine.model_prefs import ModelPrefs, PrefsError, read_prefs, write_prefs
from engine.models import ModelError, ModelSpec, spec_from_path, verify_files
from engine.settings import Settings
from engine.store.content import verify_content
from engine.store.errors import (
    InvalidModelId,
    ModelDamaged,
    ModelNotFound,
    StoreError,
    disk_errors,
)
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


@dataclass(frozen=True)
class DamagedModel:
    """A model folder whose manifest or files cannot be used; listed so it can be removed."""

    id: str  # the folder's name
    folder: Path
    reason: str

    def describe(self) -> dict[str, Any]:
        return {"id": self.id, "path": str(self.folder), "damaged": self.reason}


_Scan = tuple[list[StoredModel], list[DamagedModel]]


class ModelStore:
    """List, inspect, add and delete models under one root folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._reported: set[tuple[str, str]] = set()  # damaged entries already logged
        self._reported_lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> ModelStore:
        return cls(settings.paths.models_dir)

    # -- reading -------------------------------------------------------------------------

    def list(self) -> list[StoredModel]:
        """Every complete model, sorted by id. Damaged entries are skipped (and logged)."""
        return self.scan()[0]

    def scan(self) -> _Scan:
        """The usable models and the damaged entries, each sorted by id.

        A folder is an entry when it holds a ``manifest.json``; one that cannot be read or
        trusted is damaged, and never hides the others.
        """
        models: list[StoredModel] = []
        damaged: list[DamagedModel] = []
        try:
            folders = sorted(self.root.iterdir()) if self.root.is_dir() else []
        except OSError as exc:
            logger.warning("cannot list the models folder %s: %s", self.root, exc)
            return [], []
        for folder in folders:
            if folder.name in RESERVED or folder.name.startswith(".") or folder.is_symlink():
                continue
            manifest = folder / MANIFEST
            if not (manifest.exists() or manifest.is_symlink()):
                continue
            try:
                models.append(self.get(folder.name))
            except StoreError as exc:
                reason = exc.reason if isinstance(exc, ModelDamaged) else str(exc)
                damaged.append(DamagedModel(folder.name, folder, reason))
                self._report_damaged(damaged[-1])
        return models, damaged

    def _report_damaged(self, entry: DamagedModel) -> None:
        """Log a damaged entry once per store (listings repeat on every client poll)."""
        key = (entry.id, entry.reason)
        with self._reported_lock:
            if key in self._reported:
                return
            self._reported.add(key)
        logger.warning("skipping the damaged model %s: %s", entry.folder, entry.reason)

    def get(self, model_id: str) -> StoredModel:
        """The model with this id.

        Raises:
            InvalidModelId: the id is path-like or malformed.
            ModelNotFound: no complete model has this id.
        """
        folder = model_folder(self.root, model_id)
        if not _has_manifest(folder):
            raise ModelNotFound(f"no model '{model_id}' in the store (see: sidelight list)")
        try:
            manifest = read_manifest(_confined(folder, MANIFEST))
            if manifest.id != folder.name:
                raise StoreError(f"manifest.json names {manifest.id!r}, not its folder's name")
            _check_files(folder, manifest)
        except StoreError as exc:
            raise ModelDamaged(folder.name, str(exc)) from exc
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
        stored = self.get(model_id)
        spec = stored.spec()
        draft = self._draft_path(stored)
        if draft is not None:
            spec = dataclasses.replace(spec, draft_path=draft)
        return spec.with_prefs(self._prefs(stored, spec.context_length))

    def prefs(self, model_id: str) -> ModelPrefs:
        """The stored model's own settings (``settings.json``; the defaults when none).

        Raises:
            InvalidModelId, ModelNotFound: as :meth:`get`.
            PrefsError: the file is damaged (the message names the field).
        """
        stored = self.get(model_id)
        return read_prefs(stored.folder, model_limit=self._model_limit(stored))

    def request_prefs(self, model_id: str) -> ModelPrefs:
        """The settings a request for ``model_id`` goes by, read now (a change applies to
        the next request); the defaults for a model not in the store or a damaged file
        (logged once). Never raises for a missing model."""
        try:
            stored = self.get(model_id)
        except StoreError:
            return ModelPrefs()
        return self._prefs(stored, None)

    def set_prefs(self, model_id: str, changes: dict[str, Any]) -> ModelPrefs:
        """Apply ``changes`` (``None`` clears a field) to the model's settings and save them.

        A damaged file is replaced by ``changes`` alone. Raises:
            InvalidModelId, ModelNotFound: as :meth:`get`.
            PrefsError: a change is invalid (nothing is written).
        """
        stored = self.get(model_id)
        limit = self._model_limit(stored)
        try:
            current = read_prefs(stored.folder, model_limit=limit)
        except PrefsError as exc:
            logger.warning("%s: replacing damaged model settings (%s)", stored.id, exc)
            current = ModelPrefs()
        prefs = current.updated(changes, model_limit=limit)
        with disk_errors(f"saving the settings of {stored.id}"):
            write_prefs(stored.folder, prefs)
        return prefs

    def _model_limit(self, stored: StoredModel) -> int | None:
        try:
            return stored.spec().context_length
        except ModelError:
            return None

    def _prefs(self, stored: StoredModel, model_limit: int | None) -> ModelPrefs:
        """Its settings, or the defaults when the file is damaged (logged once, never silent)."""
        try:
            return read_prefs(stored.folder, model_limit=model_limit)
        except PrefsError as exc:
            key = (stored.id, f"settings: {exc}")
            with self._reported_lock:
                fresh = key not in self._reported
                self._reported.add(key)
            if fresh:
                logger.warning("%s: its settings.json is ignored: %s", stored.id, exc)
            return ModelPrefs()

    def spec_to_load(self, model_id: str) -> ModelSpec:
        """:meth:`spec`, with the model's files checked for damage right before a load: an
        IR folder's JSON and IR files, a GGUF file's structure and its content against the
        record taken at import (:mod:`engine.store.content`). Cheap when nothing changed.

        Raises:
            InvalidModelId, ModelNotFound: as :meth:`get`.
            ModelError: a file is damaged or changed since import (the message names it).
        """
        stored = self.get(model_id)
        spec = self.spec(model_id)
        if spec.format == "gguf":  # the structure, then the bytes against their record
            verify_content(spec.path, stored.manifest, stored.folder)
        else:
            verify_files(spec)
        return spec

    def _draft_path(self, stored: StoredModel) -> Path | None:
        """The installed draft model the catalog pairs with ``stored``, if any.

        A missing or damaged draft only means no draft: the model runs without one.
        """
        catalog_id = stored.manifest.details.get("catalog_id")
        if not isinstance(catalog_id, str):
            return None
        from engine.store.catalog import Catalog  # the catalog reads a file: only when needed

        try:
            entry = Catalog.load().find(catalog_id)
            if entry is None or entry.draft is None or entry.draft == stored.id:
                return None
            return self.get(entry.draft).path
        except (StoreError, ModelError) as exc:
            logger.info("no draft model for %s: %s", stored.id, exc)
            return None

    def resolve(self, id_or_path: str | Path) -> ModelSpec:
        """A ModelSpec for a store id or a filesystem path (for the command line).

        A valid id present in the store wins (its files checked as before any load,
        :meth:`spec_to_load`); otherwise an existing path is used.

        Raises:
            ModelError: neither a stored model nor a servable path, or damaged files.
        """
        text = str(id_or_path)
        try:
            return self.spec_to_load(text)
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
        """Delete a model, damaged or not. It disappears at once (renamed away), then its
        files go.

        Raises:
            InvalidModelId, ModelNotFound: as :meth:`get`.
            StoreError: the models folder is read-only or not ours (one sentence).
        """
        folder = model_folder(self.root, model_id)
        if not _has_manifest(folder):
            raise ModelNotFound(f"no model '{model_id}' in the store (see: sidelight list)")
        with disk_errors(f"removing {folder.name}", self.root):
            trash = self.root / TRASH
            trash.mkdir(parents=True, exist_ok=True)
            doomed = trash / f"{folder.name}-{uuid.uuid4().hex[:8]}"
            os.replace(folder, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
        logger.info("removed %s from the store", folder.name)

    def has_partial(self, model_id: str) -> bool:
        """Whether an unfinished job left files for ``model_id`` (a download can resume)."""
        return model_folder(self.root / PARTIAL, model_id).exists()

    def discard_partial(self, model_id: str) -> None:
        """Forget a job's unfinished files (a cancelled conversion, an abandoned download)."""
        folder = model_folder(self.root / PARTIAL, model_id)
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)


def _has_manifest(folder: Path) -> bool:
    manifest = folder / MANIFEST
    return manifest.exists() or manifest.is_symlink()


def _confined(folder: Path, name: str) -> Path:
    """``folder`` when ``folder/name`` is not a link leading out of it.

    Raises:
        StoreError: the file is a link out of the folder.
    """
    path = folder / name
    if path.is_symlink() and not path.resolve().is_relative_to(folder.resolve()):
        raise StoreError(f"{name} is a link to a file outside the model folder")
    return folder


def _check_files(folder: Path, manifest: Manifest) -> None:
    """The entry the manifest names is there, inside the folder, with no links out of it.

    Raises:
        StoreError: what is missing or leads outside (the message says which).
    """
    try:
        entry = inside(folder, manifest.entry)
    except InvalidModelId as exc:
        raise StoreError(f"manifest.json: 'entry' {exc}") from exc
    if manifest.format == "gguf" and not entry.is_file():
        raise StoreError(f"its file {manifest.entry} is missing")
    if manifest.format == "ir" and not entry.is_dir():
        raise StoreError(f"its folder {manifest.entry} is missing")
    top = folder.resolve()
    try:
        children = [*folder.iterdir(), *(entry.iterdir() if entry.is_dir() else ())]
    except OSError as exc:
        raise StoreError(f"its folder cannot be read ({exc.strerror or exc})") from exc
    for child in children:
        if child.is_symlink() and not child.resolve().is_relative_to(top):
            raise StoreError(f"{child.name} is a link to a file outside the model folder")


def _fsync_dir(folder: Path) -> None:
    if os.name == "nt":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
