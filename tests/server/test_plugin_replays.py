"""Replayed IDE-plugin requests: the exact paths, bodies and headers the plugins send.

Each test sends what a plugin sends (including its ``null`` fields and runner options) with
raw httpx and checks the fields that plugin reads from the answer:

* Copilot BYOK's Ollama provider: ``/api/version`` (it needs a recent version), ``/api/tags``,
  ``/api/show`` (context length from ``model_info``; agent mode only when ``capabilities``
  lists ``tools``), then chat over ``/v1``.
* Zed's Ollama provider: ``/api/tags``, ``/api/show``, ``/api/chat`` streamed as NDJSON.
* Continue's Ollama provider: ``/api/show`` by the older ``name`` field (autocomplete only
  when the template mentions ``.Suffix``), ``/api/chat`` with its options.
* LM Studio providers (Zed, Cline, Copilot): ``/api/v0/models``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import dialogue
from tests.server.harness import ServerProcess, running_server

pytestmark = pytest.mark.slow

MODEL = "sidelight-demo"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("replay-home"), tiny_model) as proc:
        yield proc


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        yield client


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_copilot_byok_ollama_provider(http: httpx.Client, dialogues: dict[str, Any]) -> None:
    headers = {"content-type": "application/json", "user-agent": "GitHubCopilotChat/0.31.0"}
    version = http.get("/api/version", headers=headers)
    assert version.status_code == 200
    assert _version_tuple(version.json()["version"]) >= (0, 6, 4)  # Copilot's minimum

    tags = http.get("/api/tags", headers=headers).json()
    names = [m["model"] for m in tags["models"]]
    assert names == [f"{MODEL}:latest"]

    shown = http.post("/api/show", json={"model": names[0]}, headers=headers)
    assert shown.status_code == 200
    body = shown.json()
    arch = body["model_info"]["general.architecture"]
    assert body["model_info"][f"{arch}.context_length"] == 2048
    assert "tools" in body["capabilities"]  # else Copilot hides the model in agent mode
    assert "vision" not in body["capabilities"]

    # Copilot then chats through the OpenAI-compatible endpoint with the listed name.
    hello = dialogue(dialogues, "hello")
    chat = http.post(
        "/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": hello["messages"],
            "stream": False,
            "temperature": 0,
            "max_tokens": 256,
        },
        headers=headers,
    )
    assert chat.status_code == 200, chat.text
    assert chat.json()["choices"][0]["message"]["content"] == hello["reply"]


def test_zed_ollama_provider(http: httpx.Client, dialogues: dict[str, Any]) -> None:
    tags = http.get("/api/tags").json()
    name = tags["models"][0]["name"]
    shown = http.post("/api/show", json={"model": name}).json()
    assert "tools" in shown["capabilities"]
    assert "thinking" not in shown["capabilities"]
    assert shown["model_info"]["qwen2.context_length"] == 2048

    hello = dialogue(dialogues, "hello-system")
    system, user = hello["messages"]
    request = {
        "model": name,
        "messages": [
            {"role": "system", "content": system["content"]},
            {"role": "user", "content": user["content"], "images": None},
        ],
        "stream": True,
        "keep_alive": "5m",
        "options": {
            "num_ctx": 2048,
            "num_predict": None,
            "stop": None,
            "temperature": 0.0,
            "top_p": None,
        },
        "tools": [],
        "think": None,
    }
    with http.stream("POST", "/api/chat", json=request) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in response.iter_lines() if line]
    for line in lines:
        assert line["model"] == name
        assert line["message"]["role"] == "assistant"
        assert line["created_at"].endswith("Z")
    assert [line["done"] for line in lines] == [False] * (len(lines) - 1) + [True]
    assert "".join(line["message"]["content"] for line in lines) == hello["reply"]
    final = lines[-1]
    assert final["done_reason"] == "stop"
    for field in (
        "total_duration",
        "load_duration",
        "prompt_eval_count",
        "prompt_eval_duration",
        "eval_count",
        "eval_duration",
    ):
        assert isinstance(final[field], int), field


def test_zed_history_with_a_tool_round_trip(http: httpx.Client, dialogues: dict[str, Any]) -> None:
    """Zed replays earlier tool calls (object arguments) and results (``tool_name``)."""
    turn = dialogue(dialogues, "tool-result")
    user, _assistant, tool = turn["messages"]
    request = {
        "model": f"{MODEL}:latest",
        "messages": [
            {"role": "user", "content": user["content"], "images": None},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
                ],
                "images": None,
                "thinking": None,
            },
            {"role": "tool", "tool_name": "get_weather", "content": tool["content"]},
        ],
        "stream": False,
        "options": {"temperature": 0.0},
        "tools": turn["tools"],
    }
    response = http.post("/api/chat", json=request)
    assert response.status_code == 200, response.text
    assert response.json()["message"] == {"role": "assistant", "content": turn["reply"]}
    assert response.json()["done"] is True


def test_zed_streamed_tool_call(http: httpx.Client, dialogues: dict[str, Any]) -> None:
    """Zed reads a call from a streamed line: ``function.name`` and object ``arguments``."""
    turn = dialogue(dialogues, "tool")
    request = {
        "model": f"{MODEL}:latest",
        "messages": [{"role": "user", "content": turn["messages"][0]["content"], "images": None}],
        "stream": True,
        "keep_alive": "5m",
        "options": {"num_ctx": 2048, "temperature": 0.0},
        "tools": turn["tools"],
        "think": None,
    }
    with http.stream("POST", "/api/chat", json=request) as response:
        assert response.status_code == 200
        lines = [json.loads(line) for line in response.iter_lines() if line]
    calls = [c for line in lines for c in line["message"].get("tool_calls", [])]
    assert len(calls) == 1
    assert calls[0]["function"]["name"] == "get_weather"
    assert calls[0]["function"]["arguments"] == {"city": "Paris"}
    assert calls[0]["id"].startswith("call_")
    assert "".join(line["message"]["content"] for line in lines) == ""
    assert lines[-1]["done"] is True


def test_continue_ollama_provider(http: httpx.Client, dialogues: dict[str, Any]) -> None:
    shown = http.post("/api/show", json={"name": MODEL})
    assert shown.status_code == 200
    assert ".Suffix" not in shown.json()["template"]  # no FIM tokens: no autocomplete offer

    hello = dialogue(dialogues, "hello")
    request = {
        "model": MODEL,
        "messages": hello["messages"],
        "options": {
            "temperature": 0,
            "top_p": 0.9,
            "top_k": 40,
            "num_predict": 512,
            "stop": ["<|im_end|>"],
            "num_ctx": 2048,
            "mirostat": 0,
            "num_thread": 4,
            "use_mmap": True,
            "min_p": 0.05,
        },
        "keep_alive": 1800,
        "stream": True,
    }
    with http.stream("POST", "/api/chat", json=request) as response:
        assert response.status_code == 200
        lines = [json.loads(line) for line in response.iter_lines() if line]
    assert "".join(line["message"]["content"] for line in lines) == hello["reply"]


def test_lmstudio_model_listing(http: httpx.Client) -> None:
    data = http.get("/api/v0/models").json()
    assert data["object"] == "list"
    (model,) = data["data"]
    assert model["id"] == MODEL
    assert model["object"] == "model"
    assert model["type"] == "llm"
    assert model["state"] == "loaded"
    assert model["arch"] == "qwen2"
    assert model["max_context_length"] == 2048
    assert model["loaded_context_length"] == 2048
    assert model["capabilities"] == ["tool_use"]
    assert model["compatibility_type"] == "openvino"
    assert model["quantization"] and model["publisher"]
    one = http.get(f"/api/v0/models/{MODEL}")
    assert one.status_code == 200 and one.json() == model
    missing = http.get("/api/v0/models/nope")
    assert missing.status_code == 404 and "nope" in missing.json()["error"]
