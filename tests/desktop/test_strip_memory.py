"""Issue 28, defect 11: the chat's strip counts the memory of every engine worker.

Seen before: 460 MB shown while ~675 MB were in use with two models loaded: the strip
measured the default model's worker alone, though each loaded model has a worker of its own.
An embedding model is loaded beside the chat model by a real request to the app's server.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import psutil

from desktop.app import DesktopApp
from engine.models import DEMO_MODEL_ID
from tests.server.harness import store_embedding_model


def test_the_strip_counts_every_loaded_models_worker(
    desktop: DesktopApp, sidelight_home: Path
) -> None:
    store_embedding_model(sidelight_home, "tiny-embed")
    url = f"{desktop.controller.server_url}/v1/embeddings"
    response = httpx.post(url, json={"model": "tiny-embed", "input": ["hi"]}, timeout=120)
    assert response.status_code == 200, response.text
    loaded = {m.id: m.worker_pid for m in desktop.controller.loaded_models()}
    pids = {pid for pid in loaded.values() if pid is not None}
    assert {DEMO_MODEL_ID, "tiny-embed"} <= set(loaded) and len(pids) >= 2
    assert set(desktop.controller.worker_pids()) >= pids

    strip = desktop.chat.status_strip
    strip.sample()
    memory = strip.memory
    assert memory is not None
    measured = sum(psutil.Process(pid).memory_info().rss for pid in pids)
    largest = max(psutil.Process(pid).memory_info().rss for pid in pids)
    assert memory.workers >= 2
    # Every worker counted, not only the default model's (within what RSS moves meanwhile).
    assert memory.engine_bytes > largest * 1.1
    assert abs(memory.engine_bytes - measured) / measured < 0.15
    assert f"({memory.workers} workers: one per loaded model)" in strip.memory_label.toolTip()
    desktop.controller.runtime.scheduler.unload("tiny-embed", "test")
