"""Each dialect's renderer on the pipeline, driven by the scripted fake engine: exact chunk
and line sequences for thinking, tool calls, log-probabilities and failures mid-stream.

The fake stands in for the worker only here (replies a tiny model cannot be trained to give
on demand: thinking, a failure after the first token); the same routes run on real
inference in test_openai_e2e.py, test_openai_tools_e2e.py and test_ollama_e2e.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from engine.models import spec_from_path
from engine.server.errors import APIError, handle_api_error
from engine.server.ollama.serving import OllamaServing
from engine.server.ollama.serving_generate import GenerationServing
from engine.server.openai.serving_chat import ChatServing
from engine.server.openai.serving_completions import CompletionServing
from engine.server.pipeline import Pipeline
from tests.server.fake_engine import FakeEngine

# The demo model's files describe it (Ollama reads them); the fake engine writes its replies.
THINKING_TEMPLATE = "{% if enable_thinking %}<think>{% endif %} <tool_call>{{ tools }}"
CALL = '<tool_call>\n{"name": "lookup", "arguments": {"q": "x"}}\n</tool_call>'
LOOKUP = {"type": "function", "function": {"name": "lookup", "parameters": {}}}
HELLO = [{"role": "user", "content": "Hello"}]


@pytest.fixture
def engine(tiny_model: Path) -> FakeEngine:
    return FakeEngine(model=spec_from_path(tiny_model), chat_template=THINKING_TEMPLATE)


@pytest.fixture
def http(engine: FakeEngine) -> Iterator[TestClient]:
    pipeline = Pipeline(engine)
    ollama = GenerationServing(OllamaServing(pipeline))
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", ChatServing(pipeline).create, methods=["POST"]),
            Route("/v1/completions", CompletionServing(pipeline).create, methods=["POST"]),
            Route("/api/chat", ollama.chat, methods=["POST"]),
        ],
        exception_handlers={APIError: handle_api_error},
    )
    with TestClient(app) as client:
        yield client


def sse_events(text: str) -> list[Any]:
    payloads = [line.removeprefix("data: ") for line in text.split("\n\n") if line]
    return [p if p == "[DONE]" else json.loads(p) for p in payloads]


def test_openai_chat_streams_reasoning_calls_and_logprobs(
    http: TestClient, engine: FakeEngine
) -> None:
    engine.script("<think>Hm.</think>", CALL)
    body = {
        "model": "sidelight-demo",
        "messages": HELLO,
        "stream": True,
        "logprobs": True,
        "tools": [LOOKUP],
        "stream_options": {"include_usage": True},
    }
    events = sse_events(http.post("/v1/chat/completions", json=body).text)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    deltas = [c["choices"][0]["delta"] if c["choices"] else None for c in chunks]
    calls = [d["tool_calls"][0] for d in deltas if d and "tool_calls" in d]
    assert deltas[0] == {"role": "assistant"}
    assert deltas[1] == {"reasoning_content": "Hm."}
    assert calls[0]["function"] == {"name": "lookup", "arguments": ""}
    assert json.loads("".join(c["function"]["arguments"] for c in calls)) == {"q": "x"}
    # Each step's log-probabilities ride on its first delta.
    logprobs = [c["choices"][0]["logprobs"] for c in chunks if c["choices"]]
    tokens = [lp["content"][0]["token"] for lp in logprobs if lp]
    assert tokens == ["<think>Hm.</think>", CALL]
    assert chunks[1]["choices"][0]["logprobs"]["content"][0]["token"] == "<think>Hm.</think>"
    finish, usage = chunks[-2], chunks[-1]
    assert finish["choices"][0]["finish_reason"] == "tool_calls"
    assert usage["usage"] == {
        "prompt_tokens": 7,
        "completion_tokens": 2,
        "total_tokens": 9,
        "prompt_tokens_details": {"cached_tokens": 0},  # the fake engine caches nothing
    }
    assert usage["timings"]["predicted_n"] == 2


def test_openai_chat_whole_answer(http: TestClient, engine: FakeEngine) -> None:
    engine.script("<think>Hm.</think>", CALL)
    body = {"model": "sidelight-demo", "messages": HELLO, "tools": [LOOKUP]}
    answer = http.post("/v1/chat/completions", json=body).json()
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert (message["content"], message["reasoning_content"]) == (None, "Hm.")
    assert message["tool_calls"][0]["function"] == {"name": "lookup", "arguments": '{"q": "x"}'}
    assert answer["model"] == "sidelight-demo" and answer["timings"]["prompt_n"] == 7


def test_openai_streams_end_with_an_error_event_when_the_engine_fails(
    http: TestClient, engine: FakeEngine
) -> None:
    engine.script("Hel", error="the engine worker stopped unexpectedly")
    body = {"model": "sidelight-demo", "messages": HELLO, "stream": True}
    events = sse_events(http.post("/v1/chat/completions", json=body).text)
    assert events[1]["choices"][0]["delta"] == {"content": "Hel"}
    assert events[-1] == {
        "error": {
            "message": "the engine worker stopped unexpectedly",
            "type": "service_unavailable_error",
            "param": None,
            "code": "engine_error",
        }
    }  # and no [DONE]: the answer is incomplete

    engine.script("Hel", error="boom")
    whole = http.post("/v1/chat/completions", json={**body, "stream": False})
    assert (whole.status_code, whole.headers["retry-after"]) == (503, "2")


def test_completions_stream_raw_text_with_echo_and_offsets(
    http: TestClient, engine: FakeEngine
) -> None:
    engine.script("<think>", " raw")
    body = {"model": "sidelight-demo", "prompt": "Say", "echo": True, "stream": True}
    events = sse_events(http.post("/v1/completions", json={**body, "logprobs": 1}).text)
    texts = [e["choices"][0]["text"] for e in events[:-1]]
    assert texts == ["Say", "<think>", " raw", ""]  # never parsed
    offsets = [e["choices"][0]["logprobs"]["text_offset"] for e in events[:-1]]
    assert offsets == [[], [3], [10], []]
    assert events[-2]["choices"][0]["finish_reason"] == "stop"


def test_ollama_chat_lines_thinking_and_whole_calls(http: TestClient, engine: FakeEngine) -> None:
    engine.script("<think>Hm.</think>", "Sure.", CALL)
    body = {"model": "sidelight-demo", "messages": HELLO, "tools": [LOOKUP]}
    lines = [json.loads(line) for line in http.post("/api/chat", json=body).text.splitlines()]
    messages = [line["message"] for line in lines]
    assert "".join(m["content"] for m in messages) == "Sure."
    assert "".join(m.get("thinking", "") for m in messages) == "Hm."
    (call,) = [c for m in messages for c in m.get("tool_calls", [])]
    assert call["function"] == {"index": 0, "name": "lookup", "arguments": {"q": "x"}}
    assert lines[-1]["done"] is True and lines[-1]["done_reason"] == "stop"
    assert lines[-1]["eval_count"] == 3

    # think: false leaves the thinking out; without tools, text of a model whose files say
    # it does not think passes through as written.
    engine.script("<think>Hm.</think>", "Sure.")
    answer = http.post("/api/chat", json={**body, "think": False, "stream": False}).json()
    assert answer["message"] == {"role": "assistant", "content": "Sure."}
    engine.script("<think>Hm.</think>", " Sure.")
    answer = http.post("/api/chat", json={**body, "tools": None, "stream": False}).json()
    assert answer["message"] == {"role": "assistant", "content": "<think>Hm.</think> Sure."}


def test_ollama_failure_mid_stream_is_one_error_line(http: TestClient, engine: FakeEngine) -> None:
    engine.script("Hel", error="the engine stopped answering")
    body = {"model": "sidelight-demo", "messages": HELLO}
    lines = [json.loads(line) for line in http.post("/api/chat", json=body).text.splitlines()]
    assert lines == [
        {**lines[0], "message": {"role": "assistant", "content": "Hel"}},
        {"error": "the engine stopped answering"},
    ]
