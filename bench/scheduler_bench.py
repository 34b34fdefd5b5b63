"""What a request pays when its model must be loaded through the scheduler, over HTTP.

A real ``sidelight serve`` on the tiny demo model, with the tiny code model in its store
(built with the test harness's store helpers). For each budget:

- ``auto``: the code model is unloaded (Ollama ``keep_alive: 0``), then asked for: it loads
  in a worker of its own beside the demo model;
- ``1`` MB: only one model fits, so asking for the code model evicts the idle demo model
  first (a swap).

Then the same request with the model loaded. Prints medians and each worker's measured
memory from ``/health``. Run: ``python -m bench.scheduler_bench --repeats 3``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from engine.settings import load_settings
from tests.conftest import TINY_CODER, TINY_MODEL
from tests.server.harness import ServerProcess, store_ir_copy

CODER = "tiny-coder"


def _home() -> Path:
    home = Path(tempfile.mkdtemp(prefix="sidelight-sched-bench-"))
    models = load_settings({"SIDELIGHT_HOME": str(home)}).paths.models_dir
    models.mkdir(parents=True, exist_ok=True)
    store_ir_copy(models, CODER, TINY_CODER, task="chat", reasoning=False)
    return home


def _ask(server: ServerProcess, model: str) -> float:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 8,
        "temperature": 0,
    }
    started = time.perf_counter()
    response = httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=120)
    response.raise_for_status()
    return time.perf_counter() - started


def _wait_gone(server: ServerProcess, model: str) -> None:
    while any(m["id"] == model for m in server.health().json()["models"]):
        time.sleep(0.05)


def run(budget: str, repeats: int) -> dict[str, Any]:
    server = ServerProcess(_home(), TINY_MODEL, env={"SIDELIGHT_MEMORY_BUDGET_MB": budget})
    try:
        server.wait_ready()
        loading, loaded = [], []
        for _ in range(repeats):
            if budget == "1":
                _ask(server, "sidelight-demo")  # the demo model back in: the coder evicted
            else:
                unload = {"model": CODER, "keep_alive": 0}
                httpx.post(f"{server.base_url}/api/generate", json=unload, timeout=60)
                _wait_gone(server, CODER)
            loading.append(_ask(server, CODER))
            loaded.append(_ask(server, CODER))
        models = server.health().json()["models"]
        return {
            "budget_mb": budget,
            "request_that_loads_s": round(statistics.median(loading), 3),
            "request_loaded_s": round(statistics.median(loaded), 3),
            "workers_mb": {m["id"]: m["memory_mb"] for m in models},
        }
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps([run(budget, args.repeats) for budget in ("0", "1")], indent=2))


if __name__ == "__main__":
    main()
