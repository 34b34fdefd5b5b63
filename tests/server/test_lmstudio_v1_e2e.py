"""End to end: LM Studio's ``/api/v1`` with httpx against ``sidelight serve`` on the demo model.

Real inference through the real pipeline: the demo model answers its trained dialogues
exactly under greedy decoding (its default), so replies, reasoning and stored conversations
are asserted character for character, whole and streamed (named SSE events, read line by
line as LM Studio's clients read them). LM Studio's Python SDK (``lmstudio``) talks to
LM Studio over its own websocket API, not this REST API, so httpx is the client here.
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
    with running_server(tmp_path_factory.mktemp("lmstudio-v1-home"), tiny_model) as proc:
        yield proc


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        yield client


def chat(http: httpx.Client, **fields: Any) -> dict[str, Any]:
    response = http.post("/api/v1/chat", json={"model": MODEL, **fields})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def stream(http: httpx.Client, **fields: Any) -> list[tuple[str, dict[str, Any]]]:
    """The (event, data) pairs of a streamed chat, read as they arrive."""
    events: list[tuple[str, dict[str, Any]]] = []
    body = {"model": MODEL, "stream": True, **fields}
    with http.stream("POST", "/api/v1/chat", json=body) as response:
        assert response.status_code == 200
        name = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data = json.loads(line.removeprefix("data: "))
                assert data["type"] == name
                events.append((name, data))
    return events


def message_text(result: dict[str, Any]) -> str:
    messages = [item["content"] for item in result["output"] if item["type"] == "message"]
    assert len(messages) == 1, result["output"]
    text: str = messages[0]
    return text


def user_turn(chat_: dict[str, Any]) -> str:
    *_, last = chat_["messages"]
    assert last["role"] == "user"
    text: str = last["content"]
    return text


# ---- models --------------------------------------------------------------------------------


def test_models_list_the_demo_model_loaded(http: httpx.Client, server: ServerProcess) -> None:
    context = server.health().json()["context_length"]
    models = http.get("/api/v1/models").json()["models"]
    (demo,) = [m for m in models if m["key"] == MODEL]
    assert demo["type"] == "llm" and demo["architecture"] == "qwen2"
    assert demo["loaded_instances"] == [{"id": MODEL, "config": {"context_length": context}}]
    assert demo["max_context_length"] == 2048 and demo["format"] is None
    assert demo["quantization"] == {"name": "FP32", "bits_per_weight": 32}
    assert demo["capabilities"] == {"vision": False, "trained_for_tool_use": True}


# ---- chat ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["hello", "multibyte", "count"])
def test_chat_answers_the_trained_reply(
    http: httpx.Client, dialogues: dict[str, Any], name: str
) -> None:
    dialog = dialogue(dialogues, name)
    result = chat(http, input=user_turn(dialog))
    assert result["output"] == [{"type": "message", "content": dialog["reply"]}]
    assert result["model_instance_id"] == MODEL
    stats = result["stats"]
    assert stats["input_tokens"] > 0 and stats["total_output_tokens"] > 0
    assert stats["reasoning_output_tokens"] == 0
    assert stats["tokens_per_second"] > 0 and stats["time_to_first_token_seconds"] > 0
    assert result["response_id"].startswith("resp_")


@pytest.mark.parametrize("name", ["hello", "multibyte"])
def test_stream_answers_the_trained_reply(
    http: httpx.Client, dialogues: dict[str, Any], name: str
) -> None:
    dialog = dialogue(dialogues, name)
    events = stream(http, input=[{"type": "message", "content": user_turn(dialog)}])
    names = [n for n, _ in events]
    deltas = [d["content"] for n, d in events if n == "message.delta"]
    assert names[:4] == [
        "chat.start",
        "prompt_processing.start",
        "prompt_processing.end",
        "message.start",
    ]
    assert names[-2:] == ["message.end", "chat.end"]
    assert len(deltas) > 1  # token by token, not one block at the end
    assert "".join(deltas) == dialog["reply"]
    result = events[-1][1]["result"]
    assert message_text(result) == dialog["reply"]
    assert result["stats"]["total_output_tokens"] >= len(deltas)  # the end token counts too


def test_system_prompt(http: httpx.Client, dialogues: dict[str, Any]) -> None:
    dialog = dialogue(dialogues, "hello-system")
    system = dialog["messages"][0]["content"]
    result = chat(http, input=user_turn(dialog), system_prompt=system, temperature=0, top_k=1)
    assert message_text(result) == dialog["reply"]


def test_reasoning_is_its_own_output_item(http: httpx.Client, dialogues: dict[str, Any]) -> None:
    think = dialogue(dialogues, "think")
    expected = [
        {"type": "reasoning", "content": "2 plus 2 is 4."},
        {"type": "message", "content": "The answer is 4."},
    ]
    whole = chat(http, input=user_turn(think))
    assert whole["output"] == expected
    assert 0 < whole["stats"]["reasoning_output_tokens"] < whole["stats"]["total_output_tokens"]
    events = stream(http, input=user_turn(think))
    names = [n for n, _ in events]
    assert names.index("reasoning.end") < names.index("message.start")
    assert events[-1][1]["result"]["output"] == expected


def test_max_output_tokens_cuts_the_reply(http: httpx.Client, dialogues: dict[str, Any]) -> None:
    count = dialogue(dialogues, "count")
    result = chat(http, input=user_turn(count), max_output_tokens=3)
    assert result["stats"]["total_output_tokens"] == 3
    assert count["reply"].startswith(message_text(result))


@pytest.mark.parametrize("streamed", [False, True])
def test_previous_response_id_continues_the_conversation(
    http: httpx.Client, dialogues: dict[str, Any], streamed: bool
) -> None:
    multiturn = dialogue(dialogues, "multiturn")
    first, reply, second = multiturn["messages"]
    opened = chat(http, input=first["content"])
    assert message_text(opened) == reply["content"]
    fields = {"input": second["content"], "previous_response_id": opened["response_id"]}
    result = stream(http, **fields)[-1][1]["result"] if streamed else chat(http, **fields)
    assert message_text(result) == multiturn["reply"]
    # The same question without the stored turns is another prompt (more tokens with them).
    alone = chat(http, input=second["content"], store=False)
    assert "response_id" not in alone
    assert result["stats"]["input_tokens"] > alone["stats"]["input_tokens"]


def test_errors_are_in_lm_studio_shape(http: httpx.Client) -> None:
    unknown = http.post("/api/v1/chat", json={"model": "nope", "input": "Hi"})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["type"] == "model_not_found"
    too_long = http.post("/api/v1/chat", json={"model": MODEL, "input": "word " * 5000})
    assert too_long.status_code == 400, too_long.text
    assert too_long.json()["error"]["type"] == "invalid_request"
    stale = http.post(
        "/api/v1/chat",
        json={"model": MODEL, "input": "Hi", "previous_response_id": "resp_" + "0" * 48},
    )
    assert stale.status_code == 404
    assert stale.json()["error"]["param"] == "previous_response_id"


# ---- load and unload (last: it leaves the server to load the model again) -----------------


def test_unload_then_a_chat_loads_the_model_again(
    http: httpx.Client, server: ServerProcess, dialogues: dict[str, Any]
) -> None:
    unloaded = http.post("/api/v1/models/unload", json={"instance_id": MODEL})
    assert unloaded.status_code == 200 and unloaded.json() == {"instance_id": MODEL}
    assert server.health().json()["status"] == "idle"
    (demo,) = [m for m in http.get("/api/v1/models").json()["models"] if m["key"] == MODEL]
    assert demo["loaded_instances"] == []

    hello = dialogue(dialogues, "hello")
    events = stream(http, input=user_turn(hello))
    names = [n for n, _ in events]
    assert names[:3] == ["chat.start", "model_load.start", "model_load.end"]
    result = events[-1][1]["result"]
    assert message_text(result) == hello["reply"]
    assert result["stats"]["model_load_time_seconds"] > 0
    assert server.health().json()["status"] == "ready"

    loaded = http.post("/api/v1/models/load", json={"model": MODEL, "echo_load_config": True})
    assert loaded.status_code == 200, loaded.text
    assert loaded.json()["instance_id"] == MODEL and loaded.json()["status"] == "loaded"
    assert (
        loaded.json()["load_config"]["context_length"] == server.health().json()["context_length"]
    )
