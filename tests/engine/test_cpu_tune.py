"""CPU self-tune: candidates, choice, cache and overrides, on real demo-model measurements.

The measurements are real ``LLMPipeline`` decodes of the shipped demo model; nothing asserts
a speed (the machine is shared), only that the choice is one of the candidates, is cached
under this machine's key, and never overrides an explicit setting.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine import cpu_tune
from engine.resources import demo_model_path
from engine.settings import CpuSettings


def test_candidates_vary_only_what_the_user_left_unset() -> None:
    free = cpu_tune.candidates(CpuSettings(), physical=4, logical=8)
    assert {c.get("INFERENCE_NUM_THREADS") for c in free} == {4, 8}
    assert {c.get("KV_CACHE_PRECISION") for c in free} == {None, "f16"}
    pinned = cpu_tune.candidates(CpuSettings(threads=3, kv_cache_precision="u8"), 4, 8)
    assert pinned == [{}]
    same = cpu_tune.candidates(CpuSettings(kv_cache_precision="f16"), 2, 2)
    assert same == [{"INFERENCE_NUM_THREADS": 2}]


def test_choose_takes_the_fastest_and_the_earlier_on_a_tie() -> None:
    a, b = {"INFERENCE_NUM_THREADS": 2}, {"INFERENCE_NUM_THREADS": 4}
    assert cpu_tune.choose([(a, 10.0), (b, 12.0)]) == b
    assert cpu_tune.choose([(a, 10.0), (b, 10.0)]) == a


def test_self_tune_measures_the_demo_model_caches_and_respects_overrides(tmp_path: Path) -> None:
    cpu = CpuSettings()  # pinning off, threads and KV precision free
    measured: list[dict[str, Any]] = []
    real = cpu_tune.measure_decode(demo_model_path(), cpu.properties(), new_tokens=16)

    def measure(candidate: dict[str, Any]) -> float:
        measured.append(candidate)
        return real(candidate)

    key = cpu_tune.machine_key()
    result = cpu_tune.self_tune(
        cpu, measure, tmp_path, key=key, rounds=1, cores=(1, 2),
        measure_lookup=cpu_tune.lookup_step_cost,
    )  # fmt: skip
    cands = cpu_tune.candidates(cpu, 1, 2)
    assert measured == cands  # every candidate measured once, in order
    assert result.properties in cands
    assert all(speed > 0 for _, speed in result.figures)  # real decodes produced tokens

    assert cpu_tune.cached_choice(tmp_path, key) == result.properties
    assert result.lookup_cost is not None and result.lookup_cost > 0  # the real probe ran
    cached = cpu_tune.cached_tune(tmp_path, key)
    assert cached is not None and cached.lookup_cost == result.lookup_cost
    assert cpu_tune.cached_choice(tmp_path, key + " other") is None  # new CPU/OpenVINO
    saved = json.loads((tmp_path / cpu_tune.CACHE_FILE).read_text())
    assert saved[key]["properties"] == result.properties

    explicit = CpuSettings(threads=1, kv_cache_precision="u8")
    merged = cpu_tune.effective_properties(explicit, result.properties)
    assert merged["INFERENCE_NUM_THREADS"] == 1
    assert merged["KV_CACHE_PRECISION"] == "u8"
    assert merged["ENABLE_CPU_PINNING"] is False
    off = CpuSettings(self_tune=False)
    assert cpu_tune.effective_properties(off, result.properties) == off.properties()


def test_lookup_step_cost_times_a_real_int4_matmul() -> None:
    """The probe compiles and times a real int4 matmul on this CPU: a step with guesses
    never costs less than a plain one's noise allows, nor absurdly more (5 rows at most
    5x the work); docs/benchmarks.md has the figures (2.6-2.9 on an AVX2 CPU without VNNI)."""
    cost = cpu_tune.lookup_step_cost({"ENABLE_CPU_PINNING": False}, rounds=1, reps=4)
    assert 0.8 < cost < 8.0


def test_lookup_pays_follows_the_setting_then_the_measured_cost() -> None:
    assert cpu_tune.lookup_pays(True, 9.0) and not cpu_tune.lookup_pays(False, 1.0)
    assert cpu_tune.lookup_pays(None, None)  # not measured (self-tune off, GPU): on
    assert cpu_tune.lookup_pays(None, cpu_tune.LOOKUP_MAX_STEP_COST)
    assert not cpu_tune.lookup_pays(None, cpu_tune.LOOKUP_MAX_STEP_COST + 0.01)


def test_one_thread_runs_in_f32_only_where_the_default_is_bf16(monkeypatch: Any) -> None:
    """The choice itself; the CPU's default precision is faked here (this rule is about AMX
    CPUs, which a test machine may not be); the load below is real on any CPU."""
    monkeypatch.setattr(cpu_tune, "default_precision", lambda: "bf16")
    one = {"INFERENCE_NUM_THREADS": 1}
    assert cpu_tune.one_thread_safe(one)["INFERENCE_PRECISION_HINT"] == "f32"
    kept = {**one, "INFERENCE_PRECISION_HINT": "bf16"}
    assert cpu_tune.one_thread_safe(kept) == kept  # the user's own precision wins
    assert cpu_tune.one_thread_safe({"INFERENCE_NUM_THREADS": 2}) == {"INFERENCE_NUM_THREADS": 2}
    monkeypatch.setattr(cpu_tune, "usable_cpus", lambda: 1)
    assert cpu_tune.one_thread_safe({})["INFERENCE_PRECISION_HINT"] == "f32"  # one CPU allowed
    monkeypatch.setattr(cpu_tune, "default_precision", lambda: "f32")
    assert cpu_tune.one_thread_safe(one) == one


def _load_demo_on_one_cpu(out: Any) -> None:
    import os

    import openvino_genai as ov_genai

    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    props = cpu_tune.effective_properties(CpuSettings(self_tune=False), None)
    pipe = ov_genai.LLMPipeline(str(demo_model_path()), "CPU", **props)
    out.put(str(pipe.generate("hi", max_new_tokens=4)))


def test_a_process_allowed_one_cpu_loads_the_demo_model() -> None:
    """Real: a child pinned to one CPU (as ``taskset -c 0`` does) loads and decodes with the
    properties the engine would use. On an AMX Xeon this ended in SIGFPE before the fix."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_load_demo_on_one_cpu, args=(out,))
    child.start()
    child.join(120)
    assert child.exitcode == 0
    assert out.get(timeout=5)  # it decoded some text
