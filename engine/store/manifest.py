"""``manifest.json``: what one stored model is, written last so its presence means complete.

A model folder without a readable manifest is not a model (an interrupted job, or a
foreign folder) and the store ignores it. The manifest is written atomically (temporary file,
then rename) so a crash never leaves half a manifest.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, cast

from engine.models import TASKS, ModelTask
from engine.store.errors import StoreError

MANIFEST = "manifest.json"
SCHEMA = 1


@dataclass(frozen=True)
class Source:
    """Where a model came from: a hub repo at a commit, a conversion, or a local file."""

    kind: str  # "hub", "convert" or "gguf"
    repo: str | None = None
    revision: str | None = None
    path: str | None = None


@dataclass(frozen=True)
class Manifest:
    """Everything the store knows about one model, as saved in ``manifest.json``."""

    id: str
    name: str
    format: str  # "ir" or "gguf"
    entry: str  # "." for an IR folder, the file name for a GGUF file
    source: Source
    size_bytes: int
    weights: str | None = None  # "int4", "int8", "fp16", "fp32", or a GGUF type like "Q4_K_M"
    context_length: int | None = None
    architecture: str | None = None
    task: ModelTask = "chat"
    devices: tuple[str, ...] = ("CPU", "GPU")
    capabilities: dict[str, bool] = field(default_factory=dict)
    added_at: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["devices"] = list(self.devices)
        data["schema"] = SCHEMA
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        """Build a manifest from ``manifest.json``'s object, checking every field.

        A manifest is a file on disk anyone may have edited or damaged; nothing in it is
        trusted, so one bad entry can never break the listing of the others.

        Raises:
            StoreError: a field has the wrong type or value (the message names it).
        """
        fields = _Fields(data)
        model_format = fields.choice("format", FORMATS)
        return cls(
            id=fields.text("id"),
            name=fields.text("name", default=None) or fields.text("id"),
            format=model_format,
            entry=_entry(fields.text("entry", default="."), model_format),
            source=_source(data.get("source")),
            size_bytes=fields.count("size_bytes", default=0),
            weights=fields.text("weights", default=None),
            context_length=fields.count("context_length", default=None, minimum=1),
            architecture=fields.text("architecture", default=None),
            task=cast(ModelTask, fields.choice("task", TASKS, default="chat")),
            devices=tuple(fields.texts("devices", default=["CPU", "GPU"])),
            capabilities=fields.flags("capabilities"),
            added_at=fields.text("added_at", default=""),
            details=fields.mapping("details"),
        )


FORMATS = ("ir", "gguf")
SOURCE_KINDS = ("hub", "convert", "gguf")
_MAX_MANIFEST_BYTES = 1024 * 1024
_MISSING = object()


class _Fields:
    """Typed reads of a manifest's fields; each error names the field and what it holds."""

    def __init__(self, data: dict[str, Any], prefix: str = "") -> None:
        self._data = data
        self._prefix = prefix

    def _get(self, key: str, default: Any) -> Any:
        value = self._data.get(key, _MISSING)
        if value is _MISSING or (value is None and default is not _MISSING):
            if default is _MISSING:
                raise StoreError(f"manifest.json has no '{self._prefix}{key}'")
            return default
        return value

    def _wrong(self, key: str, expected: str, value: Any) -> StoreError:
        return StoreError(
            f"manifest.json: '{self._prefix}{key}' should be {expected}, not {_describe(value)}"
        )

    def text(self, key: str, default: Any = _MISSING) -> Any:
        value = self._get(key, default)
        if value is not default and not isinstance(value, str):
            raise self._wrong(key, "text", value)
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: Any = _MISSING) -> str:
        value = self._get(key, default)
        if value not in choices:
            raise self._wrong(key, " or ".join(repr(c) for c in choices), value)
        return str(value)

    def count(self, key: str, default: Any = _MISSING, minimum: int = 0) -> Any:
        value = self._get(key, default)
        if value is default:
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self._wrong(key, f"a whole number of at least {minimum}", value)
        return value

    def texts(self, key: str, default: Any = _MISSING) -> list[str]:
        value = self._get(key, default)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._wrong(key, "a list of text", value)
        return value

    def flags(self, key: str) -> dict[str, bool]:
        value = self._get(key, {})
        if not isinstance(value, dict) or not all(isinstance(v, bool) for v in value.values()):
            raise self._wrong(key, "an object of true/false values", value)
        return {str(k): v for k, v in value.items()}

    def mapping(self, key: str) -> dict[str, Any]:
        value = self._get(key, {})
        if not isinstance(value, dict):
            raise self._wrong(key, "an object", value)
        return value


def _source(value: Any) -> Source:
    if not isinstance(value, dict):
        raise StoreError(f"manifest.json: 'source' should be an object, not {_describe(value)}")
    unknown = set(value) - {"kind", "repo", "revision", "path"}
    if unknown:
        raise StoreError(f"manifest.json: 'source' has unknown fields {sorted(unknown)}")
    fields = _Fields(value, "source.")
    return Source(
        kind=fields.choice("kind", SOURCE_KINDS),
        repo=fields.text("repo", default=None),
        revision=fields.text("revision", default=None),
        path=fields.text("path", default=None),
    )


def _entry(entry: str, model_format: str) -> str:
    """What to load, relative to the model folder: never absolute, never climbing out."""
    path = PurePosixPath(entry.replace("\\", "/"))
    if entry.startswith(("/", "\\")) or ":" in entry or ".." in path.parts or "\0" in entry:
        raise StoreError(f"manifest.json: 'entry' {entry!r} is not a path inside the model folder")
    if model_format == "gguf" and (len(path.parts) != 1 or path.suffix.lower() != ".gguf"):
        raise StoreError(f"manifest.json: 'entry' {entry!r} should name the model's .gguf file")
    return entry


def _describe(value: Any) -> str:
    kinds = {bool: "true/false", int: "a number", float: "a number", str: "text"}
    kinds.update({list: "a list", dict: "an object", type(None): "null"})
    kind = kinds.get(type(value), type(value).__name__)
    shown = repr(value)
    return f"{kind} {shown}" if len(shown) <= 40 else kind


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def read_manifest(folder: Path) -> Manifest:
    """Read ``folder/manifest.json``.

    Raises:
        StoreError: missing, unreadable or malformed.
    """
    path = folder / MANIFEST
    try:
        if path.stat().st_size > _MAX_MANIFEST_BYTES:
            raise StoreError("manifest.json is too large to be a manifest")
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise StoreError("manifest.json is not UTF-8 text") from exc
    except json.JSONDecodeError as exc:
        raise StoreError(f"manifest.json is not valid JSON ({exc.msg}, line {exc.lineno})") from exc
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if not isinstance(data, dict):
        raise StoreError("manifest.json does not hold a JSON object")
    return Manifest.from_dict(data)


def write_manifest(folder: Path, manifest: Manifest) -> None:
    """Write ``folder/manifest.json`` atomically."""
    text = json.dumps(manifest.to_dict(), indent=2, sort_keys=True) + "\n"
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".manifest-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the model's other files are not
        os.replace(tmp, folder / MANIFEST)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
