"""keep_alive over HTTP on a real server: /api/ps expires_at, unloading with keep_alive 0.

The model is unloaded by ending its worker process, so the test reads the workers' RSS
(psutil, pid from /health) before and after.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psutil
import pytest

from tests.server.harness import ServerProcess, running_server
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

MODEL = "sidelight-demo"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("lifecycle-home")
    with running_server(home, tiny_model) as proc:
        yield proc


def generate(server: ServerProcess, **fields: object) -> httpx.Response:
    body = {"model": MODEL, "stream": False, "options": {"num_predict": 4}, **fields}
    return httpx.post(f"{server.base_url}/api/generate", json=body, timeout=60)


def expires_in(server: ServerProcess) -> float | str:
    models = httpx.get(f"{server.base_url}/api/ps").json()["models"]
    assert len(models) == 1, models
    text = models[0]["expires_at"]
    if text.startswith("2318-"):
        return text
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (moment - datetime.now(UTC)).total_seconds()


def test_ps_expires_at_follows_keep_alive(server: ServerProcess) -> None:
    assert generate(server, prompt="Hi", keep_alive="10m").status_code == 200
    assert abs(float(expires_in(server)) - 600) < 5
    assert generate(server, prompt="Hi", keep_alive=90).status_code == 200
    assert abs(float(expires_in(server)) - 90) < 5
    assert generate(server, prompt="Hi", keep_alive=-1).status_code == 200
    assert expires_in(server) == "2318-01-01T00:00:00Z"  # forever, as Ollama writes it
    health = server.health().json()
    assert health["status"] == "ready" and health["expires_at"] is None


def test_keep_alive_zero_frees_the_memory_and_a_request_reloads(server: ServerProcess) -> None:
    assert generate(server, prompt="Hi").status_code == 200
    before = server.health().json()
    old_pid = int(before["worker_pid"])
    loaded_rss = psutil.Process(old_pid).memory_info().rss
    unload = generate(server, keep_alive=0)  # Ollama's documented unload: empty prompt
    assert unload.status_code == 200 and unload.json()["done_reason"] == "unload"

    def fresh_worker() -> httpx.Response | None:
        health = server.health()
        body = health.json()
        unloaded = body["status"] == "idle" and body["worker_pid"] not in (None, old_pid)
        return health if unloaded else None

    health = wait_until(
        fresh_worker, lambda: f"an idle fresh worker: {server.health().json()}", 15, interval=0.1
    )
    body = health.json()
    assert health.status_code == 200, body  # healthy: unloaded on purpose
    assert body["model"] is None and body["unloaded"] == "keep_alive 0"
    assert httpx.get(f"{server.base_url}/api/ps").json()["models"] == []
    fresh_rss = psutil.Process(int(body["worker_pid"])).memory_info().rss
    assert fresh_rss < loaded_rss / 2, (fresh_rss, loaded_rss)
    wait_until(lambda: _gone(old_pid), f"the old worker {old_pid} exited", 10)
    again = httpx.post(
        f"{server.base_url}/api/chat",
        json={"model": MODEL, "stream": False, "messages": [{"role": "user", "content": "Hi"}]},
        timeout=60,
    )
    assert again.status_code == 200, again.text
    assert again.json()["done"] is True
    assert server.health().json()["model"] == MODEL


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie not yet reaped counts as gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_lm_studio_ttl_sets_the_idle_time(server: ServerProcess) -> None:
    """LM Studio's ttl (seconds) on its OpenAI-compatible endpoints; a bad one is a 400."""
    chat = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}
    reply = httpx.post(f"{server.base_url}/v1/chat/completions", json={**chat, "ttl": 120})
    assert reply.status_code == 200, reply.text
    assert abs(float(expires_in(server)) - 120) < 5
    completion = {"model": MODEL, "max_tokens": 4, "prompt": "Hi", "ttl": 45}
    assert httpx.post(f"{server.base_url}/v1/completions", json=completion).status_code == 200
    assert abs(float(expires_in(server)) - 45) < 5
    for bad in (0, -5, "soon", 1.5):
        refused = httpx.post(f"{server.base_url}/v1/chat/completions", json={**chat, "ttl": bad})
        assert refused.status_code == 400, (bad, refused.text)
        assert refused.json()["error"]["param"] == "ttl", refused.json()


def test_the_default_model_unloaded_before_any_request_still_answers(
    tmp_path_factory: pytest.TempPathFactory, tiny_model: Path
) -> None:
    """``sidelight serve --model PATH``, then nobody asks for a while: the model (from a path,
    not the store) is unloaded for being idle before any request named it. It must still be
    listed and answer by its id (it was a 404: only a request seen while it was loaded told
    the server its id)."""
    home = tmp_path_factory.mktemp("idle-first-home")
    env = {"SIDELIGHT_IDLE_UNLOAD_SECONDS": "1"}
    with running_server(home, tiny_model, env=env) as proc:
        wait_until(
            lambda: proc.health().json()["unloaded"] == "idle",
            lambda: f"an idle unload: {proc.health().json()}",
            30,
            interval=0.1,
        )
        listed = httpx.get(f"{proc.base_url}/v1/models").json()["data"]
        assert MODEL in {m["id"] for m in listed}, listed
        reply = httpx.post(
            f"{proc.base_url}/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]},
            timeout=60,
        )
        assert reply.status_code == 200, reply.text
