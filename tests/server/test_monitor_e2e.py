"""End to end: ``/metrics`` and the request log of a real ``sidelight serve`` on the demo model.

Real clients (the ``openai`` SDK, the ``ollama`` client) make a few requests; the metrics,
scraped with ``prometheus_client``'s own parser before and after, must move by exactly
what those requests did, and the request log must show them, each with its "copy as curl"
command (bodies are kept on this server) that replays it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import ollama
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.server.harness import ServerProcess, running_server
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

MODEL = "sidelight-demo"
HELLO = [{"role": "user", "content": "Hello"}]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("monitor-home")
    with running_server(home, tiny_model, env={"SIDELIGHT_KEEP_REQUEST_BODIES": "1"}) as proc:
        yield proc


def scrape(server: ServerProcess) -> Samples:
    """Every sample of ``/metrics``, by name and labels."""
    response = httpx.get(f"{server.base_url}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[sample.name, frozenset(sample.labels.items())] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def requests_log(server: ServerProcess, since: int = 0) -> dict[str, Any]:
    response = httpx.get(f"{server.base_url}/api/sidelight/requests?since={since}", timeout=10)
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def test_metrics_move_by_exactly_what_the_requests_did(
    server: ServerProcess, client: openai.OpenAI
) -> None:
    before = scrape(server)

    # Two OpenAI chats (one streamed), one Ollama chat and one generate, greedy.
    answer = client.chat.completions.create(model=MODEL, messages=HELLO, temperature=0)
    assert answer.usage is not None
    openai_usage = [(answer.usage.prompt_tokens, answer.usage.completion_tokens)]
    stream = client.chat.completions.create(
        model=MODEL,
        messages=HELLO,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = [chunk.usage for chunk in stream if chunk.usage is not None]
    openai_usage.append((usage[0].prompt_tokens, usage[0].completion_tokens))
    with ollama.Client(host=server.base_url, timeout=60) as local:
        chat = local.chat(model=MODEL, messages=HELLO, options={"temperature": 0})
        generate = local.generate(model=MODEL, prompt="Hello", options={"temperature": 0})
    ollama_usage = [(r.prompt_eval_count or 0, r.eval_count or 0) for r in (chat, generate)]
    # Two refusals: a bad field (400) and an unknown model (404).
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=[])
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=HELLO)

    after = scrape(server)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    chat_route = "/v1/chat/completions"
    ok = {"model": MODEL, "outcome": "ok"}
    assert moved("sidelight_requests_total", route=chat_route, dialect="openai", **ok) == 2
    assert moved("sidelight_requests_total", route="/api/chat", dialect="ollama", **ok) == 1
    assert moved("sidelight_requests_total", route="/api/generate", dialect="ollama", **ok) == 1
    refused = {"route": chat_route, "dialect": "openai", "model": "", "outcome": "client_error"}
    assert moved("sidelight_requests_total", **refused) == 2
    for dialect, usages in (("openai", openai_usage), ("ollama", ollama_usage)):
        labels = {"dialect": dialect, "model": MODEL}
        assert all(generated > 1 for _, generated in usages)  # so each has a time per token
        prompt = sum(p for p, _ in usages)
        generated = sum(g for _, g in usages)
        assert moved("sidelight_prompt_tokens_total", **labels) == prompt
        assert moved("sidelight_generated_tokens_total", **labels) == generated
        for histogram in (
            "sidelight_time_to_first_token_seconds",
            "sidelight_time_per_output_token_seconds",
            "sidelight_queue_wait_seconds",
            "sidelight_request_duration_seconds",
        ):
            assert moved(f"{histogram}_count", **labels) == 2, (histogram, dialect)
            assert moved(f"{histogram}_sum", **labels) > 0, (histogram, dialect)
            assert moved(f"{histogram}_bucket", le="+Inf", **labels) == 2
    assert moved("sidelight_request_duration_seconds_count", dialect="openai", model="") == 2
    assert moved("sidelight_time_to_first_token_seconds_count", dialect="openai", model="") == 0

    # Nothing runs now; the engine and its model as they are.
    assert value(after, "sidelight_requests_in_flight") == 0
    assert value(after, "sidelight_requests_queued") == 0
    assert value(after, "sidelight_engine_state", state="ready") == 1
    assert value(after, "sidelight_engine_state", state="loading") == 0
    assert value(after, "sidelight_engine_restarts_total") == 0
    model = {"model": MODEL, "device": "CPU"}
    assert value(after, "sidelight_model_loaded", **model) == 1
    assert value(after, "sidelight_model_memory_bytes", **model) > 50 * 2**20
    assert 0 < value(after, "sidelight_model_load_seconds", **model) < 120


def test_the_request_log_shows_a_request_and_its_curl_replays_it(
    server: ServerProcess, client: openai.OpenAI
) -> None:
    since = requests_log(server)["last_id"]
    answer = client.chat.completions.create(
        model=MODEL, messages=HELLO, temperature=0, max_tokens=40
    )

    log = requests_log(server, since)
    assert log["keep_bodies"] is True and log["running"] == []
    [entry] = log["data"]
    assert entry["id"] == log["last_id"] == since + 1
    assert entry["dialect"] == "openai"
    assert (entry["method"], entry["route"]) == ("POST", "/v1/chat/completions")
    assert entry["user_agent"].startswith("OpenAI/Python")
    assert (entry["model"], entry["status"], entry["outcome"]) == (MODEL, 200, "ok")
    assert answer.usage is not None
    assert entry["prompt_tokens"] == answer.usage.prompt_tokens
    assert entry["generated_tokens"] == answer.usage.completion_tokens
    assert entry["ttft_seconds"] > 0 and entry["tokens_per_second"] > 0
    assert entry["duration_seconds"] >= entry["ttft_seconds"]
    assert json.loads(entry["body"])["messages"] == HELLO
    # The SDK sent "Authorization: Bearer unused": the key is nowhere, its placeholder is.
    text = json.dumps(log)
    assert "unused" not in text
    curl = entry["curl"]
    assert '"Authorization: Bearer $SIDELIGHT_API_KEY"' in curl

    replayed = subprocess.run(
        ["bash", "-c", curl],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "SIDELIGHT_API_KEY": "any"},
    )
    again = json.loads(replayed.stdout)
    assert again["choices"][0]["message"]["content"] == answer.choices[0].message.content
    assert requests_log(server, since + 1)["data"][0]["user_agent"].startswith("curl/")

    # The log file has the same request on one line.
    line = f"request {entry['id']}: openai POST /v1/chat/completions model={MODEL} status=200 ok"
    assert line in server.output()


def test_a_client_that_leaves_mid_stream_is_logged_as_cancelled(
    server: ServerProcess, client: openai.OpenAI
) -> None:
    since = requests_log(server)["last_id"]
    stream = client.chat.completions.create(
        model=MODEL,
        messages=HELLO,
        max_tokens=1500,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    for index, _chunk in enumerate(stream):
        if index == 3:
            break
    # While it streams, it is in flight (no longer queued) and listed as running.
    during = scrape(server)
    assert value(during, "sidelight_requests_in_flight") == 1
    assert value(during, "sidelight_requests_queued") == 0
    [running] = requests_log(server, since)["running"]
    assert (running["id"], running["outcome"], running["route"]) == (
        0,
        None,
        "/v1/chat/completions",
    )
    assert running["generated_tokens"] >= 3 and running["prompt_tokens"] > 0
    stream.close()

    def logged() -> dict[str, Any] | None:
        found = requests_log(server, since)
        return found if found["data"] else None

    # The server notices the hang-up within an engine step; the bound only stops a hang.
    log = wait_until(logged, "the cancelled request logged", 10)
    [entry] = log["data"]
    assert (entry["status"], entry["outcome"]) == (200, "cancelled")
    assert 3 <= entry["generated_tokens"] < 1500
    assert value(scrape(server), "sidelight_requests_in_flight") == 0


def test_the_request_log_refuses_a_bad_since(server: ServerProcess) -> None:
    response = httpx.get(f"{server.base_url}/api/sidelight/requests?since=last", timeout=10)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "since"
