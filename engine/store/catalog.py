"""The curated catalog (``resources/catalog.json``) and what of it fits this machine.

The catalog steers a 16 GB laptop to models it can hold: each entry gives the download
size, the memory the model needs loaded and the devices it suits. :func:`assess` compares
that with this machine (total memory, devices OpenVINO sees) and :meth:`Catalog.recommend`
picks a first-run default.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from engine.models import ModelTask
from engine.resources import resource_path
from engine.store.errors import StoreError

logger = logging.getLogger(__name__)

GB = 1024**3
# The OS, a browser and an IDE need room too: a model should leave this share free.
_COMFORTABLE_SHARE = 0.6
_TIGHT_SHARE = 0.85

FitStatus = Literal["fits", "tight", "too-big", "no-device"]


@dataclass(frozen=True)
class CatalogEntry:
    """One curated, pre-converted model."""

    id: str
    repo: str
    name: str
    kind: str  # "chat", "coder", "reasoning", "embeddings" or "rerank"
    weights: str
    download_gb: float
    memory_gb: float
    devices: tuple[str, ...]
    context_length: int | None = None
    params: str | None = None
    capabilities: dict[str, bool] = field(default_factory=dict)
    licence: str | None = None
    summary: str = ""
    draft: str | None = None  # the catalog id of a draft model for speculative decoding

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CatalogEntry:
        return cls(
            id=str(data["id"]),
            repo=str(data["repo"]),
            name=str(data.get("name", data["id"])),
            kind=str(data.get("kind", "chat")),
            weights=str(data.get("weights", "")),
            download_gb=float(data["download_gb"]),
            memory_gb=float(data["memory_gb"]),
            devices=tuple(str(d) for d in data.get("devices", ("CPU",))),
            context_length=data.get("context_length"),
            params=data.get("params"),
            capabilities={str(k): bool(v) for k, v in data.get("capabilities", {}).items()},
            licence=data.get("licence"),
            summary=str(data.get("summary", "")),
            draft=str(data["draft"]) if data.get("draft") else None,
        )

    @property
    def task(self) -> ModelTask:
        if self.kind == "embeddings":
            return "embeddings"
        return "rerank" if self.kind == "rerank" else "chat"


@dataclass(frozen=True)
class MachineInfo:
    """What this computer offers a model: total memory and OpenVINO device families."""

    total_memory: int
    device_kinds: frozenset[str]  # "CPU", "GPU", "NPU"

    @classmethod
    def detect(cls) -> MachineInfo:
        """Ask psutil and OpenVINO (slow-ish: OpenVINO loads its plugins)."""
        import psutil

        from engine.devices import discover_devices

        kinds = {d.kind.upper() for d in discover_devices()}
        return cls(total_memory=int(psutil.virtual_memory().total), device_kinds=frozenset(kinds))


@dataclass(frozen=True)
class Fit:
    """How one catalog entry suits this machine."""

    entry: CatalogEntry
    status: FitStatus
    devices: tuple[str, ...]  # the entry's devices present here, best first
    reason: str

    @property
    def usable(self) -> bool:
        return self.status in {"fits", "tight"}

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.entry.id,
            "repo": self.entry.repo,
            "name": self.entry.name,
            "kind": self.entry.kind,
            "download_gb": self.entry.download_gb,
            "memory_gb": self.entry.memory_gb,
            "devices": list(self.entry.devices),
            "status": self.status,
            "usable_devices": list(self.devices),
            "reason": self.reason,
        }


def assess(entry: CatalogEntry, machine: MachineInfo) -> Fit:
    """Does ``entry`` fit ``machine``? Memory first, then a device it can run on."""
    status, present, reason = assess_memory(entry.memory_gb, entry.devices, machine)
    return Fit(entry, status, present, reason)


def assess_memory(
    memory_gb: float, devices: tuple[str, ...], machine: MachineInfo
) -> tuple[FitStatus, tuple[str, ...], str]:
    """Does a model needing ``memory_gb`` on one of ``devices`` fit ``machine``?

    The catalog's entries and the hub's search results are judged alike. Returns the
    status, the devices present here (best first) and the reason in words.
    """
    present = tuple(d for d in devices if d in machine.device_kinds)
    total_gb = machine.total_memory / GB
    if not present:
        return "no-device", (), f"needs {' or '.join(devices)}; none found"
    if memory_gb > total_gb * _TIGHT_SHARE:
        return (
            "too-big",
            present,
            f"needs about {memory_gb:g} GB; this machine has {total_gb:.0f} GB",
        )
    if memory_gb > total_gb * _COMFORTABLE_SHARE:
        return (
            "tight",
            present,
            f"needs about {memory_gb:g} GB of {total_gb:.0f} GB: close other programs",
        )
    return "fits", present, f"needs about {memory_gb:g} GB"


@dataclass(frozen=True)
class Catalog:
    """The curated list, looked up by catalog id or by repo."""

    entries: tuple[CatalogEntry, ...]
    first_run: tuple[str, ...] = ()
    approximate: bool = True

    @classmethod
    def load(cls, path: Path | None = None) -> Catalog:
        """Read the catalog (default: the one shipped in ``resources/``).

        Raises:
            StoreError: the file is missing or malformed.
        """
        path = path or resource_path("catalog.json")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            entries = tuple(CatalogEntry.from_dict(item) for item in data["models"])
        except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise StoreError(f"cannot read the model catalog {path}: {exc}") from exc
        return cls(
            entries=entries,
            first_run=tuple(data.get("first_run", ())),
            approximate=bool(data.get("approximate", True)),
        )

    def find(self, name: str) -> CatalogEntry | None:
        """The entry whose id or repo is ``name`` (case-insensitive)."""
        key = name.strip().lower()
        for entry in self.entries:
            if key in {entry.id.lower(), entry.repo.lower()}:
                return entry
        return None

    def assess_all(self, machine: MachineInfo) -> list[Fit]:
        return [assess(entry, machine) for entry in self.entries]

    def recommend(self, machine: MachineInfo) -> CatalogEntry | None:
        """The first-run default: the first ``first_run`` entry that fits comfortably, else
        the smallest chat model that fits at all."""
        for entry_id in self.first_run:
            entry = self.find(entry_id)
            if entry is not None and assess(entry, machine).status == "fits":
                return entry
        usable = [f.entry for f in self.assess_all(machine) if f.usable and f.entry.task == "chat"]
        return min(usable, key=lambda e: e.memory_gb, default=None)
