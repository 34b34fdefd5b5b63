"""What a stored model gets for each of its settings left unset (engine.model_prefs).

The model manager's *Settings…* dialog shows these beside each field ("default: …"), so a
person sees what clearing a field means. They come from where the engine takes them: the
model's own context limit and ``generation_config.json`` (the worker's sampling base,
:mod:`engine.worker.prepare`), and the app's settings (keep-alive, device, CPU KV
precision). Reads two small files; any thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.models import ModelError, read_json
from engine.settings import Settings
from engine.store.store import StoredModel

_CPU_KV_DEFAULT = "u8"  # OpenVINO's CPU plugin (engine.context_fit)


@dataclass(frozen=True)
class PrefDefaults:
    """Each setting's value when the model's own is unset; ``None``: off / random / unknown."""

    context_length: int | None  # the model's own limit
    keep_alive_seconds: float  # negative: kept loaded
    device: str
    kv_cache_precision: str
    temperature: float  # 0: greedy
    top_p: float
    top_k: int | None  # None: no limit
    min_p: float
    repetition_penalty: float
    seed: int | None  # None: a random seed per request


def pref_defaults(stored: StoredModel, settings: Settings) -> PrefDefaults:
    """The defaults ``stored`` is served with under ``settings``."""
    try:
        limit = stored.spec().context_length
    except ModelError:
        limit = None
    generation = read_json(stored.folder / "generation_config.json")
    samples = bool(generation.get("do_sample"))
    temperature = _number(generation.get("temperature"), 1.0) if samples else 0.0
    top_k = generation.get("top_k")
    return PrefDefaults(
        context_length=limit,
        keep_alive_seconds=settings.idle_unload_seconds,
        device=settings.device,
        kv_cache_precision=settings.cpu.kv_cache_precision or _CPU_KV_DEFAULT,
        temperature=temperature,
        top_p=_number(generation.get("top_p"), 1.0),
        top_k=top_k
        if isinstance(top_k, int) and not isinstance(top_k, bool) and top_k > 0
        else None,
        min_p=_number(generation.get("min_p"), 0.0),
        repetition_penalty=_number(generation.get("repetition_penalty"), 1.0),
        seed=None,
    )


def _number(value: object, default: float) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return default
