"""A prompt far over its model's window is refused before the worker tokenizes it (issue 25).

Before, a 15 MB message to ``/v1/messages/count_tokens`` took 3 s on a quiet 2-core machine
and 28 s on a loaded one, with every other stream on the model standing still all that time
(bench/big_body_bench.py: the stream's worst gap was 8,854 times its median). The shared
demo server (2,048-token window: a 256 KiB prompt limit) and the pure limit itself.
"""

from __future__ import annotations

import statistics
import threading
import time

import httpx
import pytest

from engine.server.errors import APIError
from engine.server.pipeline.prompt_size import (
    BYTES_PER_TOKEN,
    MIN_PROMPT_BYTES,
    check_prompt_size,
    prompt_byte_limit,
)
from engine.server.pipeline.request import GenerateRequest
from tests.server.conftest import DEMO
from tests.server.harness import ServerProcess

ANTHROPIC = {"anthropic-version": "2023-06-01"}
HUGE = "word " * (15 * 1024 * 1024 // 5)  # the body limit is 16 MiB


def test_the_limit_follows_the_window() -> None:
    assert prompt_byte_limit(None) is None
    assert prompt_byte_limit(0) is None
    assert prompt_byte_limit(512) == MIN_PROMPT_BYTES
    assert prompt_byte_limit(32_768) == 32_768 * BYTES_PER_TOKEN


def test_every_string_counts_in_utf8_bytes() -> None:
    """Contents, tool-call arguments and tool schemas all go into the prompt; a character
    counts as its UTF-8 bytes (``é`` is two), so a limit cannot be passed with CJK text."""
    limit = MIN_PROMPT_BYTES
    half = "é" * (limit // 4 + 1)  # just over half the limit in bytes
    calls = [{"id": "c", "function": {"name": "f", "arguments": half}}]
    request = GenerateRequest(
        model="m",
        dialect="responses",
        messages=[{"role": "assistant", "content": "", "tool_calls": calls}],
        tools=[{"type": "function", "function": {"name": "f", "description": half}}],
        field_names={"messages": "input"},
    )
    with pytest.raises(APIError) as refused:
        check_prompt_size(request, 512)
    assert refused.value.status == 400
    assert refused.value.param == "input"
    assert refused.value.code == "context_length_exceeded"
    check_prompt_size(GenerateRequest(model="m", dialect="openai", prompt=half), 512)


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (
            "/v1/messages/count_tokens",
            {"messages": [{"role": "user", "content": HUGE}]},
            "messages",
        ),
        (
            "/v1/messages",
            {"max_tokens": 5, "messages": [{"role": "user", "content": HUGE}]},
            "messages",
        ),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": HUGE}]}, "messages"),
        ("/v1/responses", {"input": HUGE, "store": False}, "input"),
        ("/v1/completions", {"prompt": HUGE}, "prompt"),
        ("/api/generate", {"prompt": HUGE, "stream": False}, "prompt"),
    ],
)
def test_a_prompt_over_the_window_is_refused_naming_the_field(
    server: ServerProcess, path: str, body: dict[str, object], param: str
) -> None:
    """The worker never sees it: its request counters do not move."""
    before = server.health().json()["requests"]
    reply = httpx.post(
        f"{server.base_url}{path}", json={"model": DEMO, **body}, headers=ANTHROPIC, timeout=120
    )
    assert reply.status_code == 400, reply.text[:300]
    assert f"{param}: the prompt is over 262,144 bytes" in reply.text, reply.text[:300]
    if path.startswith(("/v1/chat", "/v1/completions", "/v1/responses")):
        assert reply.json()["error"]["param"] == param
    assert server.health().json()["requests"] == before


def test_a_prompt_under_the_limit_is_still_counted(server: ServerProcess) -> None:
    """count_tokens needs no fit, only the byte bound: 200 KB of text is counted."""
    text = "word " * 40_000
    reply = httpx.post(
        f"{server.base_url}/v1/messages/count_tokens",
        json={"model": DEMO, "messages": [{"role": "user", "content": text}]},
        headers=ANTHROPIC,
        timeout=120,
    )
    assert reply.status_code == 200, reply.text[:300]
    assert reply.json()["input_tokens"] > 2_048  # over the window, and counted


def test_health_answers_as_fast_while_the_worst_body_is_refused(server: ServerProcess) -> None:
    """``/health`` latency while 15 MB bodies are read and refused, as a ratio of idle: the
    parse runs on a thread, the size check is a sum of lengths, the worker is not involved.
    (A proportion, not a timed bound: the two medians slow down together on a busy
    machine.)"""
    latencies: list[float] = []
    stop = threading.Event()

    def poll() -> None:
        with httpx.Client(base_url=server.base_url, timeout=60) as client:
            while not stop.is_set():
                started = time.perf_counter()
                client.get("/health")
                latencies.append(time.perf_counter() - started)
                stop.wait(0.02)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    stop.wait(1.0)
    idle = list(latencies)
    latencies.clear()
    body = {"model": DEMO, "messages": [{"role": "user", "content": HUGE}]}
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        for _ in range(4):
            reply = client.post("/v1/messages/count_tokens", json=body, headers=ANTHROPIC)
            assert reply.status_code == 400
    during = list(latencies)
    stop.set()
    poller.join(60)
    assert len(idle) >= 10 and len(during) >= 4, (len(idle), len(during))
    ratio = statistics.median(during) / statistics.median(idle)
    assert ratio < 10, (statistics.median(idle), statistics.median(during))
