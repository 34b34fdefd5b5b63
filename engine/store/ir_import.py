"""``sidelight import FOLDER``: copy a local OpenVINO IR folder into the store.

For a folder an export made outside Sidelight (``optimum-cli export openvino``, e.g. a
vision-language model with the ``image-text-to-text`` task): the folder must be a servable
model (:func:`engine.models.spec_from_path`) whose files check out
(:func:`engine.models.verify_files`) before anything is copied. Every regular file is copied
(never linked: the store's model must not change when the original does) into the store's
partial folder and committed whole, with a manifest from the files' facts
(``capabilities.vision`` for a model that sees).

Threading: runs on the caller's thread (the CLI's job thread); ``cancel`` is checked per chunk.
"""

from __future__ import annotations

import threading
from pathlib import Path

from engine.models import ModelError, spec_from_path, verify_files
from engine.store.errors import StoreError, disk_errors
from engine.store.facts import folder_size, ir_facts
from engine.store.gguf_import import copy_file
from engine.store.ids import id_from_name, normalize_id
from engine.store.manifest import Manifest, Source, now_iso
from engine.store.progress import Progress, ProgressCallback
from engine.store.store import ModelStore, StoredModel


def import_ir_folder(
    store: ModelStore,
    folder: Path,
    *,
    model_id: str | None = None,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> StoredModel:
    """Copy the IR folder ``folder`` into the store as a new model.

    Raises:
        ModelError: the folder is not a servable IR model, or a file is damaged.
        StoreError: the id is taken, or the disk is full or read-only.
        Cancelled: ``cancel`` was set; nothing is left behind.
    """
    spec = spec_from_path(folder)
    verify_files(spec)
    target = normalize_id(model_id) if model_id else id_from_name(spec.path.name)
    if store.contains(target):
        raise StoreError(f"a model '{target}' is already in the store (choose another with --id)")
    with disk_errors(f"importing {spec.path.name}", store.root), store.lock(target):
        store.discard_partial(target)
        staging = store.partial_folder(target)
        staging.mkdir(parents=True)
        try:
            for source in sorted(spec.path.rglob("*")):
                if source.is_symlink() or not source.is_file():
                    continue
                dest = staging / source.relative_to(spec.path)
                dest.parent.mkdir(parents=True, exist_ok=True)
                copy_file(source, dest, progress, cancel)
            stored = store.commit(staging, _manifest(target, staging, spec.path))
        except BaseException:
            store.discard_partial(target)
            raise
    if progress is not None:
        progress(Progress(phase="done"))
    return stored


def _manifest(model_id: str, staging: Path, origin: Path) -> Manifest:
    facts = ir_facts(staging)
    try:
        spec = spec_from_path(staging, model_id=model_id)
    except ModelError as exc:  # the copy differs from what was checked: say so
        raise StoreError(f"the copy of {origin.name} is not servable: {exc}") from exc
    return Manifest(
        id=model_id,
        name=origin.name,
        format="ir",
        entry=".",
        source=Source(kind="convert", path=str(origin)),
        size_bytes=folder_size(staging),
        weights=facts.weights,
        context_length=spec.context_length,
        architecture=spec.architecture,
        task=facts.task,
        devices=facts.devices,
        capabilities=facts.capabilities,
        added_at=now_iso(),
        details=facts.details,
    )
