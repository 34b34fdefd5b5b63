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

It also prices prompt lookup's guesses here: :func:`lookup_step_cost` times one int4
matmul as large as a real model's layers (64 MB of weights, more than a laptop's cache) for
one token and for one token plus four guesses (the default ``speculative_tokens``). Where
the int4 kernel is bandwidth-bound (CPUs with VNNI, where OpenVINO multiplies int8) the
guesses ride along for little; where it is compute-bound (AVX2 without VNNI: weights
unpacked to f32) a step with four guesses cost 2.6-2.9x a plain one, so every reply that
copies little ran that much slower (docs/benchmarks.md). :func:`lookup_pays` turns the setting's ``auto`` into off there.

What it cannot do: the demo model is tiny, so its speed is dominated by per-token overhead,
not memory bandwidth; the choice transfers to large models only as far as thread and KV
behaviour do. It only ever picks one of the candidates, all of them valid settings.

Threading: :func:`self_tune` blocks for seconds and uses the CPU; run it off the request
path (the engine client runs it on a background thread at start). :func:`cached_choice` and
:func:`cached_tune` are cheap (a file read) and safe from any thread.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine.settings import CpuSettings

logger = logging.getLogger(__name__)

CACHE_FILE = "cpu-tune.json"
SCHEMA = 2  # 2: lookup_cost
# Prompt lookup stays on (``prompt_lookup`` auto) while a step with its guesses costs at most
# this many plain steps: it then pays once 0.6 guessed tokens a step are accepted on average,
# which replies that copy their prompt clear easily; above it, only near-verbatim copies do.
LOOKUP_MAX_STEP_COST = 1.6

Measure = Callable[[dict[str, Any]], float]


@dataclass(frozen=True)
class TuneResult:
    """What the self-tune chose, and why."""

    key: str  # CPU name | OpenVINO version
    properties: dict[str, Any]  # the winner's tuned properties (explicit settings excluded)
    figures: list[tuple[dict[str, Any], float]]  # each candidate and its median tok/s
    tuned_at: float
    lookup_cost: float | None = None  # lookup_step_cost() under the winner; None: not measured

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

        pipe = ov_genai.LLMPipeline(str(model_dir), "CPU", **one_thread_safe({**base, **candidate}))
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


def lookup_step_cost(
    properties: dict[str, Any], guesses: int = 4, rounds: int = 3, reps: int = 8
) -> float:
    """How many plain decode steps one step with ``guesses`` guessed tokens costs here.

    Times a synthetic int4 fully-connected layer (4096 x 32768, groups of 128, asymmetric:
    the decompression pattern NNCF writes, so the CPU plugin runs the kernel a model's
    layers run) on 1 and on ``1 + guesses`` rows, interleaved, medians. 64 MB of weights
    exceed a laptop CPU's cache, so the single row is paced by memory as a model's decode
    is. About two seconds; blocks.
    """
    import numpy as np
    import openvino as ov
    import openvino.opset13 as ops

    k, n, group = 4096, 32768, 128

    def u4(shape: tuple[int, ...], byte: int) -> Any:
        tensor = ov.Tensor(ov.Type.u4, ov.Shape(list(shape)))
        tensor.data[...] = byte  # two 4-bit values a byte
        return ov.op.Constant(tensor)

    weights = ops.convert(u4((n, k // group, group), 0x5A), ov.Type.f16)
    zero = ops.convert(u4((n, k // group, 1), 0x88), ov.Type.f16)
    scale = ops.constant(np.full((n, k // group, 1), 0.01, dtype=np.float16))
    dense = ops.multiply(ops.subtract(weights, zero), scale)
    dense = ops.convert(ops.reshape(dense, ops.constant(np.array([n, k])), False), ov.Type.f32)
    x = ops.parameter([-1, k], ov.Type.f32, name="x")
    model = ov.Model([ops.matmul(x, dense, False, True)], [x], "lookup-probe")
    compiled = ov.Core().compile_model(model, "CPU", one_thread_safe(properties))
    request = compiled.create_infer_request()
    rows = {m: np.full((m, k), 0.5, dtype=np.float32) for m in (1, 1 + guesses)}
    times: dict[int, list[float]] = {m: [] for m in rows}
    for data in rows.values():
        request.infer({0: data})  # warm-up: the kernel is picked for this shape
    for _ in range(rounds):
        for m, data in rows.items():
            for _ in range(reps):
                start = time.perf_counter()
                request.infer({0: data})
                times[m].append(time.perf_counter() - start)
    plain = statistics.median(times[1])
    return statistics.median(times[1 + guesses]) / plain if plain > 0 else 1.0


def lookup_pays(setting: bool | None, cost: float | None) -> bool:
    """Whether a CPU load uses prompt lookup: the user's ``prompt_lookup`` when set, else
    (``auto``) on unless the self-tune measured its guesses too dear here."""
    if setting is not None:
        return setting
    return cost is None or cost <= LOOKUP_MAX_STEP_COST


def self_tune(
    cpu: CpuSettings,
    measure: Measure,
    cache_dir: Path,
    *,
    key: str | None = None,
    rounds: int = 3,
    cores: tuple[int, int] | None = None,
    measure_lookup: Callable[[dict[str, Any]], float] | None = None,
) -> TuneResult:
    """Measure every candidate in ``rounds`` interleaved rounds, cache and return the winner
    (and, with ``measure_lookup``, what prompt lookup's guesses cost under it)."""
    key = key or machine_key()
    physical, logical = cores or core_counts()
    cands = candidates(cpu, physical, logical)
    speeds: list[list[float]] = [[] for _ in cands]
    for _ in range(rounds if len(cands) > 1 else 1):
        for i, cand in enumerate(cands):
            speeds[i].append(measure(cand))
    figures = [(c, statistics.median(s)) for c, s in zip(cands, speeds, strict=True)]
    chosen = choose(figures)
    cost = None
    if measure_lookup is not None:
        try:
            cost = round(measure_lookup({**cpu.properties(), **chosen}), 3)
        except (RuntimeError, ValueError, OSError):  # OpenVINO's errors; a guard's pass up
            # The probe is advice: without it, prompt lookup stays as set.
            logger.exception("could not measure prompt lookup's cost on this CPU")
    result = TuneResult(
        key=key, properties=chosen, figures=figures, tuned_at=time.time(), lookup_cost=cost
    )
    _write_cache(cache_dir, result)
    logger.info(
        "CPU self-tune on %s chose %s (%s)%s",
        key,
        result.properties or "OpenVINO's defaults",
        ", ".join(f"{c or 'defaults'}: {v:.1f} tok/s" for c, v in figures),
        ""
        if cost is None
        else f"; a step with prompt-lookup guesses costs {cost:.2f} plain steps"
        f" (prompt lookup auto: {'on' if lookup_pays(None, cost) else 'off'})",
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
    desktop gives up when a reply runs meanwhile; it guards the lookup probe too). Blocks
    seconds: call it off the GUI thread and off the event loop.
    """
    key = key or machine_key()
    cached = cached_choice(cache_dir, key)
    if cached is not None:
        logger.info("CPU self-tune: cached choice for %s: %s", key, cached or "defaults")
        return None
    if on_start is not None:
        on_start()
    measure = measure_decode(model_dir, cpu.properties())
    probe: Measure = lookup_step_cost
    return self_tune(
        cpu,
        wrap(measure) if wrap else measure,
        cache_dir,
        key=key,
        measure_lookup=wrap(probe) if wrap else probe,
    )


def cached_choice(cache_dir: Path, key: str) -> dict[str, Any] | None:
    """The cached winner for ``key``, or ``None`` when this machine was not tuned yet."""
    tuned = cached_tune(cache_dir, key)
    return tuned.properties if tuned is not None else None


def cached_tune(cache_dir: Path, key: str) -> TuneResult | None:
    """The cached tune for ``key`` (its winner and lookup cost), or ``None`` when this
    machine was not tuned yet with this schema. One small file read."""
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
    props, figures = entry.get("properties"), entry.get("figures")
    if not isinstance(props, dict):
        return None
    return TuneResult(
        key=key,
        properties=dict(props),
        figures=figures if isinstance(figures, list) else [],
        tuned_at=_number(entry.get("tuned_at")) or 0.0,
        lookup_cost=_number(entry.get("lookup_cost")),
    )


def _number(value: Any) -> float | None:
    """``value`` as a float when the file holds a number there (a bool is not one)."""
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if is_number else None


def effective_properties(cpu: CpuSettings, tuned: dict[str, Any] | None) -> dict[str, Any]:
    """The properties to load with: the self-tune's choice under the explicit settings.

    Explicit settings always win; the tuned values only fill what the user left unset.
    """
    explicit = cpu.properties()
    if not cpu.self_tune or not tuned:
        return one_thread_safe(explicit)
    return one_thread_safe({**tuned, **explicit})


@functools.cache
def default_precision() -> str:
    """The CPU plugin's default inference precision here (``bf16`` on AMX Xeons)."""
    import openvino as ov

    hint = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT")
    return str(hint.get_type_name() if isinstance(hint, ov.Type) else hint)


def usable_cpus() -> int:
    """How many CPUs this process may run on (its affinity mask, where the OS has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        return len(affinity(0))
    return os.cpu_count() or 1


def one_thread_safe(properties: dict[str, Any]) -> dict[str, Any]:
    """``properties``, run in f32 when they mean one thread on a bf16-default CPU.

    OpenVINO 2026.4 compiles an LLM on one thread in bf16 into a SIGFPE (seen on an AMX
    Xeon with ``SIDELIGHT_CPU_THREADS=1``, with the self-tune's one-thread candidate, and
    with no thread setting under ``taskset -c 0``: every load ended the worker; its issue
    33300); f32 and f16 compile. One thread is the setting, or, with none, a process
    allowed one CPU. A precision the user set is kept.
    """
    threads = properties.get("INFERENCE_NUM_THREADS") or usable_cpus()
    if threads != 1 or "INFERENCE_PRECISION_HINT" in properties:
        return properties
    if default_precision() != "bf16":
        return properties
    logger.info("one CPU thread on a bf16 CPU: running in f32 (OpenVINO fails in bf16 there)")
    return {**properties, "INFERENCE_PRECISION_HINT": "f32"}


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
