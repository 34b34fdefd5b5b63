"""CPU self-tune: pick the CPU plugin properties that decode fastest on this machine.

Why: the best thread count and KV cache precision differ by CPU (physical vs logical cores,
hybrid cores, AVX-512 or not), as llama.cpp's thread choice does; one fixed default loses on
some machines. A few seconds of measurement at first start, cached, settle it per machine.

What: candidates are threads = physical cores and = logical cores, and the KV cache in
OpenVINO's default precision or f16; a setting the user made explicitly
(:class:`engine.settings.CpuSettings`) is never varied, it is used as is. Each candidate
loads an ``LLMPipeline`` on a small model (the shipped demo model) and decodes greedily;
candidates are measured in interleaved rounds and the median decode speed wins. The result
is cached in ``cache_dir/cpu-tune.json`` keyed by the CPU's name and OpenVINO's version, so
a new CPU or a new OpenVINO tunes again.

What it cannot do: the demo model is tiny, so its speed is dominated by per-token overhead,
not memory bandwidth; the choice transfers to large models only as far as thread and KV
behaviour do. It only ever picks one of the candidates, all of them valid settings.

Threading: :func:`self_tune` blocks for seconds and uses the CPU; run it off the request
path (the engine client runs it on a background thread at start). :func:`cached_choice` is
cheap (a file read) and safe from any thread.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine.settings import CpuSettings

logger = logging.getLogger(__name__)

CACHE_FILE = "cpu-tune.json"
SCHEMA = 1

Measure = Callable[[dict[str, Any]], float]


@dataclass(frozen=True)
class TuneResult:
    """What the self-tune chose, and why."""

    key: str  # CPU name | OpenVINO version
    properties: dict[str, Any]  # the winner's tuned properties (explicit settings excluded)
    figures: list[tuple[dict[str, Any], float]]  # each candidate and its median tok/s
    tuned_at: float

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, **asdict(self)}


def machine_key() -> str:
    """The CPU's name as OpenVINO reports it and OpenVINO's version."""
    import openvino as ov

    name = str(ov.Core().get_property("CPU", "FULL_DEVICE_NAME"))
    return f"{name} | {ov.get_version()}"


def core_counts() -> tuple[int, int]:
    """(physical, logical) core counts; physical falls back to logical when unknown."""
    import psutil

    logical = psutil.cpu_count(logical=True) or 1
    physical = psutil.cpu_count(logical=False) or logical
    return physical, logical


def candidates(cpu: CpuSettings, physical: int, logical: int) -> list[dict[str, Any]]:
    """The property sets to try: only the axes the user left unset are varied."""
    threads: list[int | None] = [None]
    if cpu.threads is None:
        threads = [*sorted({physical, logical})]
    kv: list[str | None] = [None] if cpu.kv_cache_precision is not None else [None, "f16"]
    out: list[dict[str, Any]] = []
    for t in threads:
        for k in kv:
            props: dict[str, Any] = {}
            if t is not None:
                props["INFERENCE_NUM_THREADS"] = t
            if k is not None:
                props["KV_CACHE_PRECISION"] = k
            out.append(props)
    return out


def choose(figures: Sequence[tuple[dict[str, Any], float]]) -> dict[str, Any]:
    """The fastest candidate; on a tie, the earlier (simpler) one."""
    if not figures:
        raise ValueError("no candidate was measured")
    best = max(range(len(figures)), key=lambda i: (figures[i][1], -i))
    return dict(figures[best][0])


def measure_decode(model_dir: Path, base: dict[str, Any], new_tokens: int = 48) -> Measure:
    """A measuring function: decode tokens/s of ``model_dir`` under ``base`` + candidate."""

    def measure(candidate: dict[str, Any]) -> float:
        import openvino_genai as ov_genai

        pipe = ov_genai.LLMPipeline(str(model_dir), "CPU", **base, **candidate)
        config = ov_genai.GenerationConfig()
        config.max_new_tokens = new_tokens
        config.ignore_eos = True
        config.do_sample = False
        stamps: list[float] = []

        def streamer(_: str) -> ov_genai.StreamingStatus:
            stamps.append(time.perf_counter())
            return ov_genai.StreamingStatus.RUNNING

        pipe.generate("Tell me about the ocean.", config)  # warm-up
        stamps.clear()
        pipe.generate("Write a short poem about sourdough bread.", config, streamer)
        if len(stamps) < 2 or stamps[-1] <= stamps[0]:
            return 0.0
        return (len(stamps) - 1) / (stamps[-1] - stamps[0])

    return measure


def self_tune(
    cpu: CpuSettings,
    measure: Measure,
    cache_dir: Path,
    *,
    key: str | None = None,
    rounds: int = 3,
    cores: tuple[int, int] | None = None,
) -> TuneResult:
    """Measure every candidate in ``rounds`` interleaved rounds, cache and return the winner."""
    key = key or machine_key()
    physical, logical = cores or core_counts()
    cands = candidates(cpu, physical, logical)
    speeds: list[list[float]] = [[] for _ in cands]
    for _ in range(rounds if len(cands) > 1 else 1):
        for i, cand in enumerate(cands):
            speeds[i].append(measure(cand))
    figures = [(c, statistics.median(s)) for c, s in zip(cands, speeds, strict=True)]
    result = TuneResult(key=key, properties=choose(figures), figures=figures, tuned_at=time.time())
    _write_cache(cache_dir, result)
    logger.info(
        "CPU self-tune on %s chose %s (%s)",
        key,
        result.properties or "OpenVINO's defaults",
        ", ".join(f"{c or 'defaults'}: {v:.1f} tok/s" for c, v in figures),
    )
    return result


def tune_unless_cached(
    cpu: CpuSettings,
    cache_dir: Path,
    model_dir: Path,
    *,
    key: str | None = None,
    on_start: Callable[[], None] | None = None,
    wrap: Callable[[Measure], Measure] | None = None,
) -> TuneResult | None:
    """Tune this machine on ``model_dir`` unless its choice is cached (None then).

    The one path for ``sidelight serve`` and the desktop app: ``on_start`` is called once
    measuring begins (not for a cached choice); ``wrap`` may guard each measurement (the
    desktop gives up when a reply runs meanwhile). Blocks seconds: call it off the GUI
    thread and off the event loop.
    """
    key = key or machine_key()
    cached = cached_choice(cache_dir, key)
    if cached is not None:
        logger.info("CPU self-tune: cached choice for %s: %s", key, cached or "defaults")
        return None
    if on_start is not None:
        on_start()
    measure = measure_decode(model_dir, cpu.properties())
    return self_tune(cpu, wrap(measure) if wrap else measure, cache_dir, key=key)


def cached_choice(cache_dir: Path, key: str) -> dict[str, Any] | None:
    """The cached winner for ``key``, or ``None`` when this machine was not tuned yet."""
    path = cache_dir / CACHE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        logger.warning("ignoring unreadable %s: %s", path, exc)
        return None
    entry = data.get(key) if isinstance(data, dict) else None
    if not isinstance(entry, dict) or entry.get("schema") != SCHEMA:
        return None
    props = entry.get("properties")
    return dict(props) if isinstance(props, dict) else None


def effective_properties(cpu: CpuSettings, tuned: dict[str, Any] | None) -> dict[str, Any]:
    """The properties to load with: the self-tune's choice under the explicit settings.

    Explicit settings always win; the tuned values only fill what the user left unset.
    """
    explicit = cpu.properties()
    if not cpu.self_tune or not tuned:
        return explicit
    return {**tuned, **explicit}


def _write_cache(cache_dir: Path, result: TuneResult) -> None:
    path = cache_dir / CACHE_FILE
    cache_dir.mkdir(parents=True, exist_ok=True)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            data = {}
    except (OSError, json.JSONDecodeError):
        data = {}
    data[result.key] = result.to_json()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    tmp.replace(path)
