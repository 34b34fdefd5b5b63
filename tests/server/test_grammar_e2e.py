"""Grammar work never stalls a model: a real ``sidelight serve`` on the demo model (issue 25).

A ``json_schema`` of 3,000 optional properties (86 KB, inside the dialects' 32 levels and
10,000 values) once froze the worker for two minutes until the watchdog killed it, and
``tool_choice: "required"`` over 64 tools of 15 properties stalled a chat for 15 s; the
same through Responses ``text.format``, Ollama ``format`` and Anthropic ``tool_choice``.
Now the planner refuses them with a 400 naming the field before the worker sees them, and
a large schema inside the limits compiles (in the grammar probe's child) while another
client's chat streams on; the worker never restarts.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.server.grammar_limits import MAX_OPTIONAL_PROPERTIES, MAX_PROPERTIES
from tests.server.harness import ServerProcess, running_server

pytestmark = pytest.mark.slow

DEMO = "sidelight-demo"
HELLO = [{"role": "user", "content": "Hello"}]


def optional_object(count: int, prefix: str = "field") -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {f"{prefix}_{i}": {"type": "string"} for i in range(count)},
    }


HUGE = optional_object(3000)  # the 86 KB schema


def openai_tools(count: int, properties: int) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": f"tool_{t}", "parameters": optional_object(properties)},
        }
        for t in range(count)
    ]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("grammar-home"), tiny_model) as proc:
        yield proc


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    """A client whose test fails if the engine worker restarted or changed meanwhile."""
    before = server.health().json()
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        yield client
    after = server.health().json()
    assert (after["restarts"], after["worker_pid"]) == (before["restarts"], before["worker_pid"])
    assert after["status"] == "ready", after


def _openai(response: httpx.Response) -> tuple[str, str | None]:
    error = response.json()["error"]
    return error["message"], error.get("param")


def _ollama(response: httpx.Response) -> tuple[str, str | None]:
    return response.json()["error"], None


def _anthropic(response: httpx.Response) -> tuple[str, str | None]:
    return response.json()["error"]["message"], None


REFUSED: list[
    tuple[str, str, dict[str, Any], Callable[[httpx.Response], tuple[str, str | None]]]
] = [
    (
        "/v1/chat/completions",
        "response_format",
        {
            "model": DEMO,
            "messages": HELLO,
            "max_tokens": 4,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "r", "schema": HUGE},
            },
        },
        _openai,
    ),
    (
        "/v1/chat/completions",
        "tools",
        {
            "model": DEMO,
            "messages": HELLO,
            "max_tokens": 4,
            "tools": openai_tools(64, 15),
            "tool_choice": "required",
        },
        _openai,
    ),
    (
        "/v1/responses",
        "text.format",
        {
            "model": DEMO,
            "input": "Hello",
            "max_output_tokens": 4,
            "store": False,
            "text": {"format": {"type": "json_schema", "name": "r", "schema": HUGE}},
        },
        _openai,
    ),
    (
        "/api/chat",
        "format",
        {"model": DEMO, "messages": HELLO, "stream": False, "format": HUGE},
        _ollama,
    ),
    (
        "/api/generate",
        "format",
        {"model": DEMO, "prompt": "Hi", "stream": False, "format": HUGE},
        _ollama,
    ),
    (
        "/v1/messages",
        "tools",
        {
            "model": DEMO,
            "max_tokens": 4,
            "messages": HELLO,
            "tools": [
                {"name": f"tool_{t}", "input_schema": optional_object(15)} for t in range(64)
            ],
            "tool_choice": {"type": "any"},
        },
        _anthropic,
    ),
]


@pytest.mark.parametrize(
    ("path", "field", "body", "read"), REFUSED, ids=[f"{p} {f}" for p, f, _, _ in REFUSED]
)
def test_a_grammar_over_the_limits_is_400_naming_its_field(
    http: httpx.Client,
    path: str,
    field: str,
    body: dict[str, Any],
    read: Callable[[httpx.Response], tuple[str, str | None]],
) -> None:
    response = http.post(path, json=body)
    assert response.status_code == 400, response.text[:500]
    message, param = read(response)
    assert message.startswith(f"{field}: the schema is too large"), message
    assert f"at most {MAX_OPTIONAL_PROPERTIES}" in message or f"at most {MAX_PROPERTIES}" in message
    assert param in (None, field)


def test_a_large_allowed_schema_compiles_while_another_chat_streams(
    http: httpx.Client, server: ServerProcess
) -> None:
    """The biggest shape the limits allow (4 objects of 127 optional properties, about a
    second of compile on the demo model) is served while a long streaming chat goes on;
    the chat finishes whole, and the worker neither restarts nor changes."""
    streamed: dict[str, Any] = {}

    def chat() -> None:
        body = {
            "model": DEMO,
            "messages": HELLO,
            "max_tokens": 1500,
            "temperature": 1.0,
            "seed": 7,
            "ignore_eos": True,
            "stream": True,
        }
        chunks = 0
        with httpx.stream(
            "POST", f"{server.base_url}/v1/chat/completions", json=body, timeout=120
        ) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    chunk = json.loads(line[6:])
                    chunks += 1
                    reason = chunk["choices"][0].get("finish_reason") if chunk["choices"] else None
                    if reason:
                        streamed["finish_reason"] = reason
        streamed["chunks"] = chunks

    thread = threading.Thread(target=chat)
    thread.start()
    schema = {
        "type": "object",
        "properties": {f"part_{k}": optional_object(127, f"p{k}") for k in range(4)},
        "required": [f"part_{k}" for k in range(4)],
    }
    body = {
        "model": DEMO,
        "messages": HELLO,
        "max_tokens": 8,
        "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}},
    }
    response = http.post("/v1/chat/completions", json=body, timeout=120)
    thread.join(120)
    assert response.status_code == 200, response.text[:500]
    assert response.json()["choices"][0]["finish_reason"] in ("stop", "length")
    assert not thread.is_alive()
    assert streamed.get("finish_reason") == "length", streamed
    assert streamed["chunks"] > 100, streamed
    assert "no grammar probe" not in server.output()  # the probe's child did the compile
