"""Several models in one real server: one engine worker per model (issue 11).

A real ``sidelight serve`` with the tiny demo model (A, the default), the tiny code model (B)
and the tiny embedding model in its store. Every reply is compared with the same model's
answer given with nothing else in flight (greedy decoding is deterministic).

To hold a request in flight for as long as a test needs, without timing anything, the test
stops A's worker process with SIGSTOP (as a debugger or the OS would) after its first token
and lets it go on with SIGCONT: A's request is then provably running in the engine while
the other requests are made. The watchdog (120 s) does not fire in that span.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from engine.settings import load_settings
from tests.conftest import TINY_CODER
from tests.server.harness import (
    ServerProcess,
    running_server,
    store_embedding_model,
    store_ir_copy,
)
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

A = "sidelight-demo"
B = "tiny-coder"
EMBED = "tiny-embed"
LONG = 400  # tokens of A's (and B's) long replies
PROMPT = [{"role": "user", "content": "Count to ten."}]
TEXTS = ["def add(a, b): return a + b", "a sentence about the sea"]


def _home(tmp: Path) -> Path:
    models = load_settings({"SIDELIGHT_HOME": str(tmp)}).paths.models_dir
    models.mkdir(parents=True, exist_ok=True)
    store_ir_copy(models, B, TINY_CODER, task="chat", reasoning=False)
    store_embedding_model(tmp, EMBED)
    return tmp


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[ServerProcess]:
    home = _home(tmp_path_factory.mktemp("sched-home"))
    with running_server(home, tiny_model) as proc:
        yield proc


def chat(server: ServerProcess, model: str, max_tokens: int = 24) -> httpx.Response:
    body = {
        "model": model,
        "messages": PROMPT,
        "temperature": 0,
        "max_tokens": max_tokens,
        "ignore_eos": max_tokens == LONG,
    }
    return httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=120)


def content(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    text: str = response.json()["choices"][0]["message"]["content"]
    return text


def embed(server: ServerProcess) -> list[list[float]]:
    body = {"model": EMBED, "input": TEXTS}
    response = httpx.post(f"{server.base_url}/v1/embeddings", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return [item["embedding"] for item in response.json()["data"]]


def models(server: ServerProcess) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in server.health().json()["models"]}


def worker_pid(server: ServerProcess, model: str) -> int:
    return int(models(server)[model]["worker_pid"])


@dataclass
class Stream:
    """A streamed chat reply read on a thread: its text, finish reason or error."""

    server: ServerProcess
    model: str
    order: list[str]  # shared: names of finished things, in the order they finished
    first_token: threading.Event = field(default_factory=threading.Event)
    text: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None
    thread: threading.Thread | None = None

    def start(self) -> Stream:
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        assert self.first_token.wait(120), self.error
        return self

    def join(self) -> None:
        assert self.thread is not None
        self.thread.join(120)
        assert not self.thread.is_alive()

    def _read(self) -> None:
        body = {
            "model": self.model,
            "messages": PROMPT,
            "temperature": 0,
            "max_tokens": LONG,
            "ignore_eos": True,
            "stream": True,
        }
        url = f"{self.server.base_url}/v1/chat/completions"
        try:
            with httpx.stream("POST", url, json=body, timeout=120) as response:
                for line in response.iter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[len("data: ") :])
                    if "error" in chunk:
                        self.error = str(chunk["error"].get("message"))
                        continue
                    for choice in chunk.get("choices", []):
                        piece = choice.get("delta", {}).get("content")
                        if piece:
                            self.text.append(piece)
                            self.first_token.set()
                        if choice.get("finish_reason"):
                            self.finish_reason = choice["finish_reason"]
        except httpx.HTTPError as exc:
            self.error = repr(exc)
        finally:
            self.order.append(self.model)
            self.first_token.set()


def test_a_long_stream_keeps_streaming_while_another_model_and_embeddings_answer(
    server: ServerProcess,
) -> None:
    ref_a = content(chat(server, A, LONG))
    ref_b = content(chat(server, B))
    ref_e = embed(server)
    # B leaves again (Ollama's keep_alive 0), so it must load while A streams.
    unload = {"model": B, "keep_alive": 0}
    assert httpx.post(f"{server.base_url}/api/generate", json=unload, timeout=60).status_code == 200
    wait_until(lambda: B not in models(server), "B unloaded")
    assert (B, "keep_alive") in unloaded_models(server)  # /health says why it went

    order: list[str] = []
    stream = Stream(server, A, order).start()
    pid_a = worker_pid(server, A)
    os.kill(pid_a, signal.SIGSTOP)  # A's request is in flight in its engine until SIGCONT
    try:
        answer_b = content(chat(server, " TINY-Coder "))  # ids: any case, spaces trimmed
        vectors = embed(server)
        order.append("others")
        loaded = models(server)
    finally:
        os.kill(pid_a, signal.SIGCONT)
    stream.join()

    assert answer_b == ref_b
    assert vectors == ref_e
    assert loaded[A]["active_requests"] == 1 and loaded[A]["worker_pid"] == pid_a
    assert {loaded[B]["worker_pid"], loaded[EMBED]["worker_pid"]}.isdisjoint({pid_a})
    assert stream.error is None and stream.finish_reason == "length"
    assert "".join(stream.text) == ref_a
    assert order == ["others", A]
    health = server.health().json()
    assert health["model"] == A and health["requests"]["cancelled"] == 0

    listed = {
        m["id"]: m["status"] for m in httpx.get(f"{server.base_url}/v1/models").json()["data"]
    }
    assert (listed[A], listed[B], listed[EMBED]) == ("loaded", "loaded", "loaded")
    ps = httpx.get(f"{server.base_url}/api/ps").json()["models"]
    assert {m["name"] for m in ps} == {f"{A}:latest", f"{B}:latest", f"{EMBED}:latest"}
    v0 = httpx.get(f"{server.base_url}/api/v0/models").json()["data"]
    assert {m["id"] for m in v0 if m["state"] == "loaded"} == {A, B, EMBED}
    # LM Studio's unload of a model that is not the default ends its worker alone.
    body = {"instance_id": "Tiny-Coder"}
    unloaded = httpx.post(f"{server.base_url}/api/v1/models/unload", json=body, timeout=60)
    assert unloaded.status_code == 200 and unloaded.json() == {"instance_id": B}
    wait_until(lambda: B not in models(server), "B unloaded over LM Studio's API")
    assert set(models(server)) == {A, EMBED}
    # An embedding model too (its worker holds no chat model for a client to release).
    body = {"instance_id": EMBED}
    unloaded = httpx.post(f"{server.base_url}/api/v1/models/unload", json=body, timeout=60)
    assert unloaded.status_code == 200 and unloaded.json() == {"instance_id": EMBED}
    assert set(models(server)) == {A}


def test_killing_one_models_worker_ends_only_its_requests(server: ServerProcess) -> None:
    ref_b = content(chat(server, B, LONG))
    ref_a = content(chat(server, A))
    order: list[str] = []
    # Both loaded by the reference chats: their pids are read first, so B is stopped right
    # at its first token (two /health calls in between let a fast B finish on a busy CI).
    pid_a, pid_b = worker_pid(server, A), worker_pid(server, B)
    stream_a = Stream(server, A, order).start()
    stream_b = Stream(server, B, order).start()
    os.kill(pid_b, signal.SIGSTOP)  # B stays in flight while A's worker dies
    try:
        os.kill(pid_a, signal.SIGKILL)
        stream_a.join()
    finally:
        os.kill(pid_b, signal.SIGCONT)
    stream_b.join()

    assert stream_a.error is not None and "stopped unexpectedly" in stream_a.error
    assert stream_b.error is None and stream_b.finish_reason == "length"
    assert "".join(stream_b.text) == ref_b
    assert order == [A, B]
    assert worker_pid(server, B) == pid_b  # B's worker was never touched
    # A's client restarted its worker and reloaded A; it answers again.
    wait_until(lambda: models(server).get(A, {}).get("state") == "ready", "A reloaded")
    assert content(chat(server, A)) == ref_a


@pytest.fixture(scope="module")
def small_server(
    tmp_path_factory: pytest.TempPathFactory, tiny_model: Path
) -> Iterator[ServerProcess]:
    """A budget of 1 MB: only one model at a time (a model that fits nothing loads alone)."""
    home = _home(tmp_path_factory.mktemp("sched-small-home"))
    env = {"SIDELIGHT_MEMORY_BUDGET_MB": "1", "SIDELIGHT_LOAD_WAIT_SECONDS": "10"}
    with running_server(home, tiny_model, env=env) as proc:
        yield proc


def test_with_room_for_one_model_b_waits_for_a_and_a_is_never_cancelled(
    small_server: ServerProcess,
) -> None:
    server = small_server
    ref_a = content(chat(server, A, LONG))
    ref_b = content(chat(server, B))  # evicts the idle A
    assert set(models(server)) == {B}

    order: list[str] = []
    stream = Stream(server, A, order).start()  # evicts the idle B, loads A
    assert set(models(server)) == {A}
    pid_a = worker_pid(server, A)
    os.kill(pid_a, signal.SIGSTOP)
    resumed = False
    try:
        # A stays busy for B's whole wait: B is refused, A is not touched.
        refused = chat(server, B)
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"] == "5"
        assert refused.json()["error"]["code"] == "model_no_room"
        assert "never cancelled" in refused.json()["error"]["message"]

        answers: list[httpx.Response] = []

        def ask_b() -> None:
            answers.append(chat(server, B))
            order.append(B)

        asking = threading.Thread(target=ask_b, daemon=True)
        asking.start()
        wait_until(lambda: B in server.health().json()["waiting_for_room"], "B waiting")
        os.kill(pid_a, signal.SIGCONT)
        resumed = True
        stream.join()
        asking.join(120)
    finally:
        if not resumed:
            os.kill(pid_a, signal.SIGCONT)

    assert stream.error is None and stream.finish_reason == "length"
    assert "".join(stream.text) == ref_a
    assert content(answers[0]) == ref_b
    assert order == [A, B]  # B was answered only once A's stream had ended
    assert set(models(server)) == {B}


def test_an_idle_embedding_model_ends_its_worker(tmp_path: Path, tiny_model: Path) -> None:
    """Embedding workers have no chat model for a client's idle timer: the scheduler ends
    them after ``idle_unload_seconds`` unused, and the next request loads them again."""
    home = _home(tmp_path / "home")
    env = {"SIDELIGHT_IDLE_UNLOAD_SECONDS": "1"}
    with running_server(home, tiny_model, env=env) as server:
        first = embed(server)
        pid = worker_pid(server, EMBED)
        wait_until(lambda: EMBED not in models(server), "the embedding worker ended")
        # /health says why (the demo model idles out too: its own event, first or not).
        wait_until(lambda: (EMBED, "idle") in unloaded_models(server), "the unload event")
        wait_until(lambda: not psutil.pid_exists(pid) or _zombie(pid), "its process exited")
        assert embed(server) == first
        assert worker_pid(server, EMBED) != pid


def test_an_embedding_models_expiry_is_its_idle_timeout(tmp_path: Path, tiny_model: Path) -> None:
    """/api/ps shows when an idle embedding model will go (``idle_unload_seconds`` after its
    last use), not "forever": its worker does end then."""
    home = _home(tmp_path / "home")
    with running_server(home, tiny_model, env={"SIDELIGHT_IDLE_UNLOAD_SECONDS": "300"}) as server:
        embed(server)
        used = datetime.now(UTC)
        response = httpx.get(f"{server.base_url}/api/ps", timeout=30)
    assert response.status_code == 200, response.text
    (entry,) = [m for m in response.json()["models"] if m["name"].startswith(EMBED)]
    expires = datetime.fromisoformat(entry["expires_at"].replace("Z", "+00:00"))
    assert used + timedelta(seconds=200) < expires <= used + timedelta(seconds=300), expires


def unloaded_models(server: ServerProcess) -> list[tuple[str, str]]:
    """/health's recent unload events: (model id, reason), oldest first."""
    gone = server.health().json()["unloaded_models"]
    return [(event["id"], event["reason"]) for event in gone]


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
