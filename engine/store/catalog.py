"""The curated catalog (``resources/catalog.json``) and what of it fits this machine.

The catalog steers a 16 GB laptop to models it can hold: each entry gives the download
size, the memory the model needs loaded and the devices it suits. :func:`assess` compares
that with this machine (total memory, devices OpenVINO sees) and :meth:`Catalog.recommend`
picks a first-run default.

Each entry names its ``source``: ``"download"`` (a pre-converted OpenVINO IR repo) or
``"convert"`` (no such build exists, so ``repo`` is the upstream transformers model that
``sidelight convert`` turns into IR), and whether it was ``verified`` (downloaded or
converted, and served once) on the machine that wrote the file, with ``verified_note``
saying why not. :meth:`CatalogEntry.from_dict` refuses a malformed entry with a message
naming the entry and the field, so a bad catalog fails loudly instead of misleading.
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
CatalogSource = Literal["download", "convert"]
SOURCES: tuple[CatalogSource, ...] = ("download", "convert")
KINDS = (
    "chat",
    "coder",
    "reasoning",
    "vision",
    "embeddings",
    "rerank",
    "transcription",
    "speech",
)
# The kinds whose model task is named like the kind (the rest are chat models).
_OWN_TASK: dict[str, ModelTask] = {
    "vision": "vision",
    "embeddings": "embeddings",
    "rerank": "rerank",
    "transcription": "transcription",
    "speech": "speech",
}
DEVICES = ("CPU", "GPU", "NPU")
# The weights a conversion can write (engine.store.convert.WEIGHTS; not imported: that
# module pulls in the whole store).
CONVERT_WEIGHTS = ("int4", "int8", "fp16")


@dataclass(frozen=True)
class CatalogEntry:
    """One curated model: a pre-converted IR to download, or a model to convert."""

    id: str
    repo: str
    name: str
    kind: str  # one of KINDS
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
    source: CatalogSource = "download"
    note: str = ""  # where the figures come from, caveats
    verified: bool = False  # downloaded (or converted) and served once where it was written
    verified_note: str = ""  # why not, when not verified

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CatalogEntry:
        """Read one entry of ``catalog.json``.

        Raises:
            ValueError: a field is missing or malformed; the message names the entry and
                the field.
        """
        entry_id = str(data["id"])
        where = f"catalog entry {entry_id!r}"
        source = data.get("source", "download")
        if source not in SOURCES:
            raise ValueError(f"{where}: 'source' must be 'download' or 'convert', not {source!r}")
        verified = data.get("verified")
        if not isinstance(verified, bool):
            raise ValueError(f"{where}: 'verified' must be true or false, not {verified!r}")
        verified_note = data.get("verified_note", "")
        if not isinstance(verified_note, str) or (not verified and not verified_note.strip()):
            raise ValueError(
                f"{where}: 'verified_note' must say why the entry was not downloaded and served"
            )
        note = data.get("note", "")
        if not isinstance(note, str):
            raise ValueError(f"{where}: 'note' must be a string, not {note!r}")
        kind = str(data.get("kind", "chat"))
        if kind not in KINDS:
            raise ValueError(f"{where}: 'kind' must be one of {', '.join(KINDS)}, not {kind!r}")
        devices = tuple(str(d) for d in data.get("devices", ("CPU",)))
        unknown = [d for d in devices if d not in DEVICES]
        if not devices or unknown:
            raise ValueError(f"{where}: 'devices' must be some of {', '.join(DEVICES)}: {devices}")
        repo = str(data["repo"])
        if repo.count("/") != 1 or not all(repo.split("/")):
            raise ValueError(f"{where}: 'repo' must be a hub repo id (org/name), not {repo!r}")
        weights = str(data.get("weights", ""))
        if source == "convert" and weights not in CONVERT_WEIGHTS:
            raise ValueError(
                f"{where}: a 'convert' entry's 'weights' must be one of "
                f"{', '.join(CONVERT_WEIGHTS)}, not {weights!r}"
            )
        return cls(
            id=entry_id,
            repo=repo,
            name=str(data.get("name", entry_id)),
            kind=kind,
            weights=weights,
            download_gb=_positive(data, "download_gb", where),
            memory_gb=_positive(data, "memory_gb", where),
            devices=devices,
            context_length=data.get("context_length"),
            params=data.get("params"),
            capabilities={str(k): bool(v) for k, v in data.get("capabilities", {}).items()},
            licence=data.get("licence"),
            summary=str(data.get("summary", "")),
            draft=str(data["draft"]) if data.get("draft") else None,
            source=source,
            note=note,
            verified=verified,
            verified_note=verified_note,
        )

    @property
    def needs_conversion(self) -> bool:
        """Whether getting this model means converting ``repo``, not downloading an IR."""
        return self.source == "convert"

    def convert_command(self) -> str:
        """The ``sidelight convert`` command that makes this entry (for a ``convert`` source)."""
        npu = " --npu" if self.devices[0] == "NPU" else ""
        return f"sidelight convert {self.repo} --weights {self.weights}{npu} --id {self.id}"

    @property
    def task(self) -> ModelTask:
        return _OWN_TASK.get(self.kind, "chat")


def _positive(data: dict[str, Any], key: str, where: str) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"{where}: {key!r} must be a positive number of GB, not {value!r}")
    return float(value)


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
            "source": self.entry.source,
            "verified": self.entry.verified,
            "verified_note": self.entry.verified_note,
            "note": self.entry.note,
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
        the smallest chat model that fits at all and downloads (a first run has no
        conversion tools to count on)."""
        for entry_id in self.first_run:
            entry = self.find(entry_id)
            if entry is not None and assess(entry, machine).status == "fits":
                return entry
        usable = [
            f.entry
            for f in self.assess_all(machine)
            if f.usable and f.entry.task == "chat" and not f.entry.needs_conversion
        ]
        return min(usable, key=lambda e: e.memory_gb, default=None)
