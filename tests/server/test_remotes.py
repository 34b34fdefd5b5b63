"""Remote servers as model sources, end to end: a second real ``sidelight serve`` (the demo
model, behind its own API key) and a misbehaving fake remote (tests/server/fake_remote.py)
registered with ``sidelight remote add`` as remotes of a first server, driven through the
``openai``, ``anthropic`` and ``ollama`` clients, Claude Code itself and raw HTTP.

A llama-server remote has its own module, tests/server/test_llama_remote.py (its recorded
answers replayed, or a real build when one is named).

One first server, one second server and one fake remote for the module (each server
starts in a few seconds on the demo model).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

from tests.conftest import ROOT
from tests.server.fake_remote import MODELS, FakeRemote
from tests.server.harness import (
    TINY_EMBED,
    ServerProcess,
    free_port,
    running_server,
    store_ir_copy,
)
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

BOX_KEY = "box-key-0123456789"
FAKE_KEY = "fake-key-9876543210"
MODEL = "sidelight-demo"
CAP = 100  # SIDELIGHT_REMOTE_MAX_MODELS of the first server
PROMPT: Any = [{"role": "user", "content": "Say hello in a few words."}]


def remote_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SIDELIGHT_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", "remote", *args],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The second server: the remote named ``box``, behind its own key."""
    home = tmp_path_factory.mktemp("box")
    store_ir_copy(home / "models", "tiny-embed", TINY_EMBED, task="embeddings", reasoning=False)
    with running_server(home, None, "--api-key", BOX_KEY) as server:
        yield server


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeRemote]:
    remote = FakeRemote()
    remote.start()
    yield remote
    remote.stop()


@pytest.fixture(scope="module")
def first(
    tmp_path_factory: pytest.TempPathFactory, box: ServerProcess, fake: FakeRemote
) -> Iterator[ServerProcess]:
    """The laptop's server, with ``box`` and ``fake`` registered before it starts."""
    home = tmp_path_factory.mktemp("first")
    for name, url, key in (("Box", box.base_url, BOX_KEY), ("fake", fake.url, FAKE_KEY)):
        added = remote_cli(home, "add", name, url, "--api-key", key)
        assert added.returncode == 0, added.stderr
    env = {
        "SIDELIGHT_REMOTE_REFRESH_SECONDS": "0.5",
        "SIDELIGHT_REMOTE_READ_TIMEOUT_SECONDS": "2",
        "SIDELIGHT_REMOTE_MAX_MODELS": str(CAP),
    }
    with running_server(home, None, env=env) as server:
        wait_until(lambda: _listed(server, f"{MODEL}@box"), "box's models listed", 60)
        wait_until(lambda: _listed(server, "stall@fake"), "fake's models listed", 60)
        yield server


def _listed(server: ServerProcess, model_id: str) -> bool:
    ids = [m["id"] for m in httpx.get(f"{server.base_url}/v1/models").json()["data"]]
    return model_id in ids


def _openai(server: ServerProcess, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=key, max_retries=0)


def _direct(box: ServerProcess) -> str:
    """What the second server itself answers to PROMPT (greedy)."""
    with _openai(box, BOX_KEY) as client:
        reply = client.chat.completions.create(
            model=MODEL,
            messages=PROMPT,
            max_tokens=24,
            temperature=0,
        )
    return reply.choices[0].message.content or ""


@pytest.fixture(scope="module")
def direct_text(box: ServerProcess) -> str:
    text = _direct(box)
    assert text
    return text


def test_the_cli_registers_lists_and_forgets_remotes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert (
        remote_cli(home, "add", "w1", "http://10.0.0.2:11680", "--api-key", "s3cret").returncode
        == 0
    )
    listing = remote_cli(home, "list", "--json")
    assert json.loads(listing.stdout) == [
        {"name": "w1", "url": "http://10.0.0.2:11680", "api_key": True}
    ]
    assert "s3cret" not in remote_cli(home, "list").stdout
    stored = home / "config" / "remotes.json"
    assert stored.stat().st_mode & 0o777 == 0o600
    bad = remote_cli(home, "add", "a@b", "http://x")
    assert bad.returncode == 2 and "no '@'" in bad.stderr
    bad = remote_cli(home, "add", "w2", "ftp://x")
    assert bad.returncode == 2 and "http://" in bad.stderr
    assert remote_cli(home, "rm", "W1").returncode == 0
    assert remote_cli(home, "rm", "w1").returncode == 1
    assert json.loads(remote_cli(home, "list", "--json").stdout) == []


def test_remote_models_are_listed_and_marked_in_every_listing(first: ServerProcess) -> None:
    url = first.base_url
    cards = {m["id"]: m for m in httpx.get(f"{url}/v1/models").json()["data"]}
    card = cards[f"{MODEL}@box"]
    assert card["owned_by"] == "remote:box" and card["remote"] == "box"
    assert cards[MODEL]["owned_by"] == "sidelight"  # the local model stays local
    tags = {m["name"]: m for m in httpx.get(f"{url}/api/tags").json()["models"]}
    assert tags[f"{MODEL}@box:latest"]["remote"] == "box"
    assert tags[f"{MODEL}@box:latest"]["details"]["format"] == "remote"
    v0 = {m["id"]: m for m in httpx.get(f"{url}/api/v0/models").json()["data"]}
    assert v0[f"{MODEL}@box"]["compatibility_type"] == "remote"
    v1 = {m["key"]: m for m in httpx.get(f"{url}/api/v1/models").json()["models"]}
    assert v1[f"{MODEL}@box"]["remote"] == "box"
    one = httpx.get(f"{url}/v1/models/{MODEL}@BOX")
    assert one.status_code == 200 and one.json()["id"] == f"{MODEL}@box"


def test_a_remote_listing_hundreds_of_models_is_cut_at_the_cap(first: ServerProcess) -> None:
    ids = [m["id"] for m in httpx.get(f"{first.base_url}/v1/models").json()["data"]]
    from_fake = [i for i in ids if i.endswith("@fake")]
    assert len(from_fake) == CAP
    health = httpx.get(f"{first.base_url}/health").json()
    remotes = {r["name"]: r for r in health["remotes"]}
    assert remotes["fake"]["state"] == "ok"
    # 6 named models + MODELS numbered ones; one entry without an id is left out, and said.
    assert remotes["fake"]["left_out"] == MODELS + 6 - CAP
    assert "without a usable id" in remotes["fake"]["error"]
    assert remotes["box"] == {**remotes["box"], "state": "ok", "models": 2, "api_key": True}
    assert BOX_KEY not in json.dumps(health) and FAKE_KEY not in json.dumps(health)


def test_openai_client_gets_the_remotes_own_answer(first: ServerProcess, direct_text: str) -> None:
    with _openai(first) as client:
        whole = client.chat.completions.create(
            model=f"{MODEL}@box",
            messages=PROMPT,
            max_tokens=24,
            temperature=0,
        )
        stream = client.chat.completions.create(
            model=f"{MODEL}@box", messages=PROMPT, max_tokens=24, temperature=0,
            stream=True, stream_options={"include_usage": True},
        )  # fmt: skip
        chunks = list(stream)
    assert whole.choices[0].message.content == direct_text
    assert whole.model == f"{MODEL}@box"
    assert whole.usage is not None and whole.usage.completion_tokens > 0
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == direct_text
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0


def test_anthropic_client_gets_the_remotes_own_answer(
    first: ServerProcess, direct_text: str
) -> None:
    with anthropic.Anthropic(base_url=first.base_url, api_key="unused", max_retries=0) as client:
        greedy = {"temperature": 0}
        message = client.messages.create(
            model=f"{MODEL}@box",
            max_tokens=24,
            messages=PROMPT,
            extra_body=greedy,
        )
        with client.messages.stream(
            model=f"{MODEL}@box",
            max_tokens=24,
            messages=PROMPT,
            extra_body=greedy,
        ) as stream:
            streamed = "".join(stream.text_stream)
        counted = client.messages.count_tokens(model=f"{MODEL}@box", messages=PROMPT)
    assert message.content[0].type == "text" and message.content[0].text == direct_text
    assert streamed == direct_text
    # Anthropic counts cache reads apart from input_tokens; count_tokens counts them all.
    used = message.usage
    assert counted.input_tokens == used.input_tokens + (used.cache_read_input_tokens or 0) > 0


def test_ollama_client_gets_the_remotes_own_answer(first: ServerProcess, direct_text: str) -> None:
    with ollama.Client(host=first.base_url, timeout=60) as client:
        options = {"num_predict": 24, "temperature": 0}
        whole = client.chat(model=f"{MODEL}@box", messages=PROMPT, options=options)
        parts = client.chat(model=f"{MODEL}@box", messages=PROMPT, options=options, stream=True)
        streamed = "".join(part.message.content or "" for part in parts)
    assert whole.message.content == direct_text
    assert streamed == direct_text


def test_a_remote_tool_call_reaches_each_dialect_as_its_own(first: ServerProcess) -> None:
    tool: Any = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    with _openai(first) as client:
        reply = client.chat.completions.create(
            model="tools@fake",
            messages=PROMPT,
            tools=[tool],
        )
    calls: list[Any] = list(reply.choices[0].message.tool_calls or [])
    assert reply.choices[0].finish_reason == "tool_calls"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Oslo"})
    ]
    with anthropic.Anthropic(base_url=first.base_url, api_key="unused", max_retries=0) as claude:
        message = claude.messages.create(
            model="tools@fake", max_tokens=64, messages=PROMPT,
            tools=[{"name": "get_weather", "input_schema": tool["function"]["parameters"]}],
        )  # fmt: skip
    uses = [b for b in message.content if b.type == "tool_use"]
    assert message.stop_reason == "tool_use"
    assert [(u.name, u.input) for u in uses] == [("get_weather", {"city": "Oslo"})]


def test_remote_embeddings_pass_through(first: ServerProcess, box: ServerProcess) -> None:
    texts = ["def add(a, b):", "return a + b"]
    with _openai(box, BOX_KEY) as client:
        direct = client.embeddings.create(model="tiny-embed", input=texts)
    with _openai(first) as client:
        remote = client.embeddings.create(model="tiny-embed@box", input=texts)
    assert remote.model == "tiny-embed@box"
    assert [d.embedding for d in remote.data] == [d.embedding for d in direct.data]
    assert remote.usage.prompt_tokens == direct.usage.prompt_tokens > 0
    with ollama.Client(host=first.base_url, timeout=60) as client:
        embedded = client.embed(model="tiny-embed@box", input=texts)
    assert [list(v) for v in embedded.embeddings] == [d.embedding for d in direct.data]


CLAUDE_BIN = ROOT / "tests" / "agents" / "claude" / "node_modules" / ".bin"


@pytest.mark.skipif(shutil.which("node") is None, reason="Claude Code needs Node.js")
def test_claude_code_uses_the_remote_model(
    first: ServerProcess, box: ServerProcess, tmp_path: Path
) -> None:
    """The issue's "done when": Claude Code on the laptop's server, a model of another
    Sidelight; it prints what it prints talking to that server directly."""
    cli = shutil.which("claude", path=str(CLAUDE_BIN))
    assert cli, "Claude Code is not installed: run python3 packaging/dev.py test (npm ci)"

    def run(base_url: str, token: str, model: str) -> subprocess.CompletedProcess[str]:
        home, project = tmp_path / model / "home", tmp_path / model / "project"
        home.mkdir(parents=True)
        project.mkdir()
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(home),
            "USERPROFILE": str(home),
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_AUTH_TOKEN": token,
            "ANTHROPIC_MODEL": model,
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        args = ["-p", "Hello", "--bare", "--tools", "", "--system-prompt", "You are helpful."]
        return subprocess.run(
            [cli, *args], cwd=project, env=env, capture_output=True, text=True,
            encoding="utf-8", timeout=180, check=False,
        )  # fmt: skip

    remote = run(first.base_url, "sidelight", f"{MODEL}@box")
    direct = run(box.base_url, BOX_KEY, MODEL)
    assert remote.returncode == 0 == direct.returncode, remote.stderr + direct.stderr
    assert remote.stdout == direct.stdout and remote.stdout.strip()


def _error(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


def test_remote_failures_name_the_remote(first: ServerProcess) -> None:
    chat = f"{first.base_url}/v1/chat/completions"

    def ask(model: str, **extra: Any) -> httpx.Response:
        body = {"model": model, "messages": PROMPT, **extra}
        return httpx.post(chat, json=body, timeout=30)

    unknown = ask("no-such-model@box")
    assert unknown.status_code == 404
    assert _error(unknown)["message"].startswith("remote 'box': ")
    refused = ask("refuse@fake")
    assert refused.status_code == 400
    assert _error(refused)["message"] == "remote 'fake': temperature is too hot"
    assert _error(refused)["param"] == "temperature"
    slow = ask("stall@fake")
    assert slow.status_code == 504 and _error(slow)["code"] == "remote_timeout"
    assert "remote 'fake'" in _error(slow)["message"]
    # No remote of that name: an ordinary unknown model.
    assert ask("x@nowhere").status_code == 404


def _sse_payloads(first: ServerProcess, model: str) -> list[Any]:
    body = {"model": model, "messages": PROMPT, "stream": True}
    with httpx.stream(
        "POST", f"{first.base_url}/v1/chat/completions", json=body, timeout=30
    ) as response:
        assert response.status_code == 200
        lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]


def test_a_remote_dying_mid_stream_ends_the_callers_stream_with_an_error(
    first: ServerProcess, direct_text: str
) -> None:
    died = _sse_payloads(first, "die@fake")
    text = "".join(
        p["choices"][0]["delta"].get("content") or ""
        for p in died
        if isinstance(p, dict) and p.get("choices")
    )
    assert text == "partial answer"  # what came before the cut is passed on
    assert died[-1]["error"]["code"] == "remote_stream_broken"
    assert "remote 'fake'" in died[-1]["error"]["message"]
    paused = _sse_payloads(first, "pause@fake")
    assert paused[-1]["error"]["code"] == "remote_timeout"
    junk = _sse_payloads(first, "junk@fake")
    assert junk[-1]["error"]["code"] == "remote_bad_stream"
    # Nothing else is disturbed: the local model and the other remote answer as before.
    with _openai(first) as client:
        local = client.chat.completions.create(model=MODEL, messages=PROMPT, max_tokens=4)
        again = client.chat.completions.create(
            model=f"{MODEL}@box",
            messages=PROMPT,
            max_tokens=24,
            temperature=0,
        )
    assert local.choices[0].message.content
    assert again.choices[0].message.content == direct_text


def test_a_remote_added_while_serving_is_picked_up_and_a_dead_one_is_a_502(
    first: ServerProcess,
) -> None:
    home = Path(first.log_path).parent
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    assert remote_cli(home, "add", "gone", dead).returncode == 0

    def gone_listed() -> dict[str, Any] | None:
        health = httpx.get(f"{first.base_url}/health").json()
        states = {r["name"]: r for r in health["remotes"]}
        return states.get("gone") if states.get("gone", {}).get("state") == "failed" else None

    state = wait_until(gone_listed, "the new remote tried", 30)
    assert "Connect" in state["error"]
    response = httpx.post(
        f"{first.base_url}/v1/chat/completions",
        json={"model": "anything@gone", "messages": PROMPT},
        timeout=30,
    )
    assert response.status_code == 502
    assert _error(response)["code"] == "remote_unreachable"
    assert "remote 'gone'" in _error(response)["message"]
    assert remote_cli(home, "rm", "gone").returncode == 0
    health = httpx.get(f"{first.base_url}/health")
    assert health.status_code == 200  # a dead remote never makes the server unhealthy


def test_each_remote_gets_its_own_key_and_no_log_holds_one(
    first: ServerProcess, box: ServerProcess, fake: FakeRemote
) -> None:
    # box answered above, and it refuses requests without BOX_KEY: its key was sent.
    assert fake.seen_keys and set(fake.seen_keys) == {f"Bearer {FAKE_KEY}"}
    home = Path(first.log_path).parent
    logs = [first.log_path, *(home / "logs").glob("*.log")]
    for path in logs:
        text = path.read_text(encoding="utf-8", errors="replace")
        assert BOX_KEY not in text and FAKE_KEY not in text, path
