"""A model's own settings: how it loads and the sampling the API uses when a request says none.

LM Studio keeps load settings (context length, keep-loaded time, device) and sampling
defaults per model, remembered and applied by its server; Ollama does the same through a
Modelfile's ``PARAMETER`` lines. Sidelight keeps them in ``settings.json`` beside a stored
model's ``manifest.json`` (written by ``sidelight model-settings``, the model manager or
``PUT /api/sidelight/models/{id}/settings``):

- ``context_length``: serve with at most this many tokens of context (at most the model's);
- ``keep_alive_seconds``: unload after this long idle (a negative value keeps it loaded); a
  request's own ``keep_alive``/``ttl`` still wins;
- ``device``: the device it loads on when nothing else names one;
- ``kv_cache_precision``: the KV cache's element type on the CPU (``u8``, ``f16``, ``bf16``,
  ``f32``; over the ``cpu_kv_cache_precision`` setting and the self-tune's choice);
- ``temperature``, ``top_p``, ``top_k``, ``min_p``, ``repetition_penalty``, ``seed``: the
  sampling of a request that leaves the field out (an explicit value always wins).

The file comes from disk and may have been edited by hand: every field is checked here and
a bad file is refused whole with the field named (:class:`PrefsError`); the store then
serves the model with its defaults and says why (never silently). Pure: no I/O here beyond
:func:`read_prefs`/:func:`write_prefs`; no threads.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from engine.settings import KV_CACHE_PRECISIONS

PREFS_FILE: Final = "settings.json"
MAX_FILE_BYTES: Final = 16 * 1024
_DEVICE = re.compile(r"^(CPU|GPU(\.\d{1,2})?|NPU)$")
# (lowest, highest) for each number; ints are whole numbers in that range.
_FLOATS: Final[dict[str, tuple[float, float]]] = {
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "min_p": (0.0, 1.0),
    "repetition_penalty": (0.01, 10.0),
    "keep_alive_seconds": (-1.0, 365 * 24 * 3600.0),
}
_INTS: Final[dict[str, tuple[int, int]]] = {
    "context_length": (256, 1 << 24),
    "top_k": (0, 1 << 20),
    "seed": (0, (1 << 32) - 1),
}


def parse_value(text: str) -> Any:
    """A setting's value as typed (CLI ``KEY=VALUE``, the settings dialog): empty clears it,
    a number when it reads as one, else the text itself (:class:`ModelPrefs`'s checks refuse
    it, naming the setting)."""
    text = text.strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else text


def _keys() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(ModelPrefs))


class PrefsError(ValueError):
    """A model setting (or the file holding them) is invalid; ``field`` names which."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class ModelPrefs:
    """One model's settings; ``None`` everywhere means "Sidelight's defaults"."""

    context_length: int | None = None
    keep_alive_seconds: float | None = None
    device: str | None = None
    kv_cache_precision: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None

    @classmethod
    def from_dict(cls, data: Any, *, model_limit: int | None = None) -> ModelPrefs:
        """Validated prefs from JSON data (unknown keys and wrong types refused).

        Raises:
            PrefsError: naming the first bad field.
        """
        if not isinstance(data, dict):
            raise PrefsError("model settings must be a JSON object")
        known = {f.name for f in dataclasses.fields(cls)}
        for key in data:
            if key not in known:
                raise PrefsError(f"unknown model setting {key!r}", str(key))
        values = {key: _check(key, value) for key, value in data.items() if value is not None}
        limit = values.get("context_length")
        if limit is not None and model_limit is not None and limit > model_limit:
            raise PrefsError(
                f"context_length: {limit} is more than the model's own {model_limit}",
                "context_length",
            )
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set (what ``settings.json`` holds)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def load_settings(self) -> tuple[Any, ...]:
        """The values of :data:`LOAD_KEYS` (what a loaded model compares to reload)."""
        return tuple(getattr(self, key) for key in LOAD_KEYS)

    def updated(self, changes: dict[str, Any], *, model_limit: int | None = None) -> ModelPrefs:
        """These prefs with ``changes`` applied (a ``None`` value clears a field).

        Raises:
            PrefsError: as :meth:`from_dict`.
        """
        merged: dict[str, Any] = {**self.to_dict(), **changes}
        return ModelPrefs.from_dict(
            {k: v for k, v in merged.items() if v is not None}, model_limit=model_limit
        )


def _check(key: str, value: Any) -> Any:
    if key == "kv_cache_precision":
        if not isinstance(value, str) or value.lower() not in KV_CACHE_PRECISIONS:
            raise PrefsError(f"{key}: must be one of {', '.join(KV_CACHE_PRECISIONS)}", key)
        return value.lower()
    if key == "device":
        if not isinstance(value, str) or not _DEVICE.match(value.upper()):
            raise PrefsError("device: must be CPU, GPU, GPU.N or NPU", key)
        return value.upper()
    if key in _INTS:
        low, high = _INTS[key]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise PrefsError(f"{key}: must be a whole number from {low} to {high}", key)
        return value
    low_f, high_f = _FLOATS[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PrefsError(f"{key}: must be a number from {low_f:g} to {high_f:g}", key)
    number = float(value)
    if not math.isfinite(number) or not low_f <= number <= high_f:
        raise PrefsError(f"{key}: must be a number from {low_f:g} to {high_f:g}", key)
    if key == "keep_alive_seconds" and number < 0:
        number = -1.0  # "forever", Ollama's spelling
    return number


def read_prefs(folder: Path, *, model_limit: int | None = None) -> ModelPrefs:
    """The prefs in ``folder`` (none: the defaults).

    Raises:
        PrefsError: the file is too large, not JSON, or has a bad field.
    """
    path = folder / PREFS_FILE
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return ModelPrefs()
    except OSError as exc:
        raise PrefsError(f"{path.name}: cannot be read: {exc.strerror or exc}") from exc
    if len(raw) > MAX_FILE_BYTES:
        raise PrefsError(f"{path.name}: larger than {MAX_FILE_BYTES // 1024} KB")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PrefsError(f"{path.name}: not valid JSON ({exc})") from exc
    return ModelPrefs.from_dict(data, model_limit=model_limit)


def write_prefs(folder: Path, prefs: ModelPrefs) -> None:
    """Write ``prefs`` to ``folder`` atomically (the defaults remove the file)."""
    path = folder / PREFS_FILE
    data = prefs.to_dict()
    if not data:
        path.unlink(missing_ok=True)
        return
    temporary = path.with_name(f".{PREFS_FILE}.tmp")
    temporary.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, path)


LOAD_KEYS: Final = ("context_length", "device", "kv_cache_precision")
"""The settings a model is loaded with: a change reloads it (the next load)."""

PREF_KEYS: Final[tuple[str, ...]] = _keys()
"""Every setting's name, in the order ``sidelight settings`` lists them."""
