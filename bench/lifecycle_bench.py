"""What the model lifecycle costs: worker processes, loads, memory per model, swaps.

Measures, on the real engine (EngineClient + worker process) and the small local models:

- the overhead of one more engine worker process: time until it is up, its RSS and USS with
  nothing loaded, and the same once OpenVINO GenAI is imported (which a load does anyway);
- load time of each chat model, first (cold worker) and again (files in the OS page cache);
- RSS / USS of the worker with each model loaded, after one request, and after unloading it (what keep_alive 0
  gives back);
- the latency a request pays when its model is loaded (first token), when it must be loaded
  first, and when another model must be swapped out for it.

Run: ``python -m bench.lifecycle_bench --repeats 3`` (about a minute on 2 cores).
Prints one JSON document; docs/benchmarks.md holds the latest figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from engine.models import ModelSpec, spec_from_path
from engine.settings import load_settings
from engine.supervisor.client import EngineClient
from engine.supervisor.states import ERROR, IDLE, READY
from engine.worker.messages import GenerationRequest, SamplingParams

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
MODELS = {
    "sidelight-demo": ROOT / "resources" / "models" / "sidelight-demo",
    "tiny-coder": ROOT / "tests" / "fixtures" / "tiny-coder",
}
MB = 1024 * 1024


def _memory(pid: int) -> dict[str, float]:
    info = psutil.Process(pid).memory_full_info()
    return {"rss_mb": round(info.rss / MB, 1), "uss_mb": round(info.uss / MB, 1)}


def _import_genai(out: Any, back: Any) -> None:  # pragma: no cover - runs in a child
    started = time.perf_counter()
    import openvino_genai  # noqa: F401

    out.put(time.perf_counter() - started)
    back.get()  # wait until the parent has measured us


def genai_import_cost() -> dict[str, float]:
    """A spawned interpreter with openvino_genai imported: the floor of any worker."""
    ctx = multiprocessing.get_context("spawn")
    to_child, from_child = ctx.Queue(), ctx.Queue()
    process = ctx.Process(target=_import_genai, args=(from_child, to_child))
    started = time.perf_counter()
    process.start()
    seconds = from_child.get(timeout=120)
    total = time.perf_counter() - started
    assert process.pid is not None
    memory = _memory(process.pid)
    to_child.put(None)
    process.join(10)
    return {"import_seconds": round(seconds, 2), "spawn_to_imported_seconds": round(total, 2)} | (
        memory
    )


def make_client(home: Path) -> EngineClient:
    settings = load_settings({"SIDELIGHT_HOME": str(home)})
    settings.paths.ensure()
    return EngineClient(settings)


def start_worker(client: EngineClient) -> float:
    started = time.perf_counter()
    client.start()
    status = client.wait_for({IDLE, ERROR}, 120)
    assert status.state == IDLE, status.message
    # worker_pid arrives with WorkerStarted, which also sets IDLE
    return time.perf_counter() - started


def load(client: EngineClient, spec: ModelSpec) -> float:
    started = time.perf_counter()
    client.load(spec)
    status = client.wait_for({READY, ERROR}, 300)
    assert status.state == READY and status.model and status.model.id == spec.id, status
    return time.perf_counter() - started


async def first_token_seconds(client: EngineClient) -> float:
    request = GenerationRequest(
        messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=4,
        sampling=SamplingParams(temperature=0),
    )
    started = time.perf_counter()
    stream = client.submit(request)
    first: float | None = None
    async for _event in stream:
        if first is None:
            first = time.perf_counter() - started
    return first if first is not None else time.perf_counter() - started


def measure(repeats: int) -> dict[str, Any]:
    specs = {name: spec_from_path(path, name) for name, path in MODELS.items()}
    results: dict[str, Any] = {"genai_import": genai_import_cost()}
    idle: list[dict[str, float]] = []
    spawn: list[float] = []
    loads: dict[str, dict[str, list[float]]] = {n: {"first": [], "again": []} for n in specs}
    loaded_mem: dict[str, list[dict[str, float]]] = {n: [] for n in specs}
    served_mem: dict[str, list[dict[str, float]]] = {n: [] for n in specs}
    unloaded_mem: list[dict[str, float]] = []
    warm_ttft: list[float] = []
    cold_ttft: list[float] = []
    swap_ttft: list[float] = []
    names = list(specs)
    with tempfile.TemporaryDirectory(prefix="sidelight-lifecycle-") as home:
        for _ in range(repeats):
            for name in names:
                client = make_client(Path(home))
                try:
                    spawn.append(start_worker(client))
                    pid = client.status().worker_pid
                    assert pid is not None
                    idle.append(_memory(pid))
                    loads[name]["first"].append(load(client, specs[name]))
                    loaded_mem[name].append(_memory(pid))
                    warm_ttft.append(asyncio.run(first_token_seconds(client)))
                    served_mem[name].append(_memory(pid))
                    client.unload()
                    client.wait_for({IDLE}, 60)
                    time.sleep(0.5)
                    unloaded_mem.append(_memory(pid))
                    loads[name]["again"].append(load(client, specs[name]))
                    # A request whose model must be loaded first (worker up, nothing loaded).
                    client.unload()
                    client.wait_for({IDLE}, 60)
                    started = time.perf_counter()
                    load(client, specs[name])
                    ttft = asyncio.run(first_token_seconds(client))
                    cold_ttft.append(time.perf_counter() - started)
                    del ttft
                    # A request whose model must replace another one (today's swap).
                    other = specs[names[(names.index(name) + 1) % len(names)]]
                    started = time.perf_counter()
                    load(client, other)
                    asyncio.run(first_token_seconds(client))
                    swap_ttft.append(time.perf_counter() - started)
                finally:
                    client.close()

    return (
        results
        | summarize(
            specs,
            spawn,
            idle,
            unloaded_mem,
            loads,
            loaded_mem,
            served_mem,
            (warm_ttft, cold_ttft, swap_ttft),
        )
        | {"repeats": repeats}
    )


def _med(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def _med_mem(values: list[dict[str, float]]) -> dict[str, float]:
    return {key: _med([v[key] for v in values]) for key in values[0]}


def summarize(
    specs: dict[str, ModelSpec],
    spawn: list[float],
    idle: list[dict[str, float]],
    unloaded_mem: list[dict[str, float]],
    loads: dict[str, dict[str, list[float]]],
    loaded_mem: dict[str, list[dict[str, float]]],
    served_mem: dict[str, list[dict[str, float]]],
    ttfts: tuple[list[float], list[float], list[float]],
) -> dict[str, Any]:
    """Medians of every measured quantity."""
    warm_ttft, cold_ttft, swap_ttft = ttfts
    names = list(specs)
    results: dict[str, Any] = {}
    results["worker_spawn_to_idle_seconds"] = _med(spawn)
    results["worker_idle_memory"] = _med_mem(idle)
    results["worker_after_unload_memory"] = _med_mem(unloaded_mem)
    results["models"] = {
        name: {
            "files_mb": round(
                sum(f.stat().st_size for f in MODELS[name].rglob("*") if f.is_file()) / MB, 1
            ),
            "load_first_seconds": _med(loads[name]["first"]),
            "load_again_seconds": _med(loads[name]["again"]),
            "worker_loaded_memory": _med_mem(loaded_mem[name]),
            "worker_after_a_request_memory": _med_mem(served_mem[name]),
        }
        for name in names
    }
    results["first_token_seconds"] = {
        "model_loaded": _med(warm_ttft),
        "model_must_load": _med(cold_ttft),
        "model_must_swap": _med(swap_ttft),
    }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(json.dumps(measure(args.repeats), indent=2))


if __name__ == "__main__":
    main()
