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
from pathlib import Path
from typing import Any

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
    task: str = "chat"  # "chat" or "embeddings"
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
        try:
            source = Source(**data["source"])
            return cls(
                id=str(data["id"]),
                name=str(data.get("name") or data["id"]),
                format=str(data["format"]),
                entry=str(data.get("entry", ".")),
                source=source,
                size_bytes=int(data.get("size_bytes", 0)),
                weights=data.get("weights"),
                context_length=data.get("context_length"),
                architecture=data.get("architecture"),
                task=str(data.get("task", "chat")),
                devices=tuple(data.get("devices", ("CPU", "GPU"))),
                capabilities={str(k): bool(v) for k, v in data.get("capabilities", {}).items()},
                added_at=str(data.get("added_at", "")),
                details=dict(data.get("details", {})),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreError(f"manifest is malformed: {exc}") from exc


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def read_manifest(folder: Path) -> Manifest:
    """Read ``folder/manifest.json``.

    Raises:
        StoreError: missing, unreadable or malformed.
    """
    path = folder / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise StoreError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise StoreError(f"{path} does not hold a JSON object")
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
