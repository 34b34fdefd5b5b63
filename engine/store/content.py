"""A stored GGUF file's content record: checked before every load, cheaply.

``sidelight import`` records in the manifest (``details.content``) what the copied file was:
its full SHA-256, its sampled digest (:func:`engine.file_key.sampled_digest`) and its
:class:`~engine.file_key.FileKey`. Before each load :func:`verify_content` compares the key
and the sampled digest (a ``stat`` and a few MB read). When either differs the file is
checked whole again (:func:`engine.gguf_check.check_gguf`) and its full SHA-256 compared
with the recorded one: a file whose bytes changed since import is refused, even when its
structure is still valid (a rewrite that keeps the layout serves garbage). A file whose bytes
are the same (the store moved, a backup restored) gets its new key recorded (best effort).

A model stored before records existed (or downloaded from a hub) gets its record on its
first load, so later changes to it are caught too.

What this does not defend against: someone who can write the model folder can rewrite the
manifest's record along with the file. The structural check still runs whenever the key
changes, so such a file can serve garbage but not crash the engine.

Threading: safe from any thread; a cache of verified versions (path -> key and sampled
digest) is a dict under a lock, and the manifest is rewritten atomically.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.file_key import FileKey, full_digest, sampled_digest
from engine.gguf import GGUFError
from engine.gguf_check import check_gguf
from engine.models import ModelError
from engine.store.manifest import Manifest, write_manifest

logger = logging.getLogger(__name__)

CONTENT = "content"  # the manifest's details key


@dataclass(frozen=True)
class ContentRecord:
    """What a stored GGUF file held when it was last verified whole."""

    sha256: str
    sample: str
    key: FileKey

    def to_dict(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "sample": self.sample, "file": self.key.to_dict()}

    @classmethod
    def from_details(cls, details: dict[str, Any]) -> ContentRecord | None:
        """The record in a manifest's details; None when there is none (or it is damaged)."""
        data = details.get(CONTENT)
        if not isinstance(data, dict):
            return None
        key = FileKey.from_dict(data.get("file"))
        digest, sample = data.get("sha256"), data.get("sample")
        if key is None or not isinstance(digest, str) or not isinstance(sample, str):
            return None
        return cls(digest, sample, key)


def record_content(file: Path, advance: Callable[[int], None] | None = None) -> ContentRecord:
    """Check ``file`` whole and take its record (reads the whole file once).

    Raises:
        GGUFError: the file is not a valid GGUF file.
        OSError: it cannot be read.
    """
    key = FileKey.of(file)
    header = check_gguf(file)
    digest = full_digest(file, advance)
    return ContentRecord(digest, sampled_digest(file, header.header_size), key)


def verify_content(file: Path, manifest: Manifest, folder: Path) -> None:
    """Refuse ``file`` (a stored model's GGUF) when its bytes differ from its record.

    Raises:
        ModelError: the file is damaged, or changed since it was recorded (one sentence).
    """
    try:
        _verify(file, manifest, folder)
    except GGUFError as exc:
        raise ModelError(str(exc)) from exc
    except OSError as exc:
        raise ModelError(f"cannot read {file.name}: {exc.strerror or exc}") from exc


def _verify(file: Path, manifest: Manifest, folder: Path) -> None:
    record = ContentRecord.from_details(manifest.details)
    key = FileKey.of(file)
    header = check_gguf(file, sampled=True)  # the structure, cached by key and sample
    sample = sampled_digest(file, header.header_size)
    with _LOCK:
        verified = _VERIFIED.get(file)
    if verified == (key, sample):
        return
    if record is not None and record.key == key and record.sample == sample:
        _remember(file, key, sample)
        return
    logger.info("%s is not as last verified: hashing it whole", file)
    digest = full_digest(file)
    if record is not None and digest != record.sha256:
        raise ModelError(
            f"{file.name} changed since it was imported (its content is not what was checked "
            "then; the copy may have been overwritten)"
        )
    _remember(file, key, sample)
    _save(folder, manifest, ContentRecord(digest, sample, key))


_VERIFIED: dict[Path, tuple[FileKey, str]] = {}
_LOCK = threading.Lock()


def _remember(file: Path, key: FileKey, sample: str) -> None:
    with _LOCK:
        _VERIFIED[file] = (key, sample)


def _save(folder: Path, manifest: Manifest, record: ContentRecord) -> None:
    """Write the new record into the manifest; a read-only store keeps the old one (the
    next process hashes the file again)."""
    details = {**manifest.details, CONTENT: record.to_dict()}
    try:
        write_manifest(folder, dataclasses.replace(manifest, details=details))
    except OSError as exc:
        logger.info("could not record the content of %s: %s", folder.name, exc)
