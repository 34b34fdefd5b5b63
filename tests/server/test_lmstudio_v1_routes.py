"""LM Studio's ``/api/v1`` over HTTP on the real pipeline and a scripted engine.

The fake engine plays fixed worker replies (thinking, a failure after the first token, a
model that must load first), so every event sequence, answer, stored conversation and error
is checked exactly; the demo model's own files describe it in the model list. Real
inference behind the same routes is in ``test_lmstudio_v1_e2e.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.testclient import TestClient

from engine.models import spec_from_path
from engine.server.auth import ApiKeyMiddleware
from engine.server.errors import (
    APIError,
    ErrorShapes,
    handle_api_error,
    handle_http_exception,
    handle_unexpected,
)
from engine.server.lmstudio import lmstudio_routes
from engine.server.lmstudio_v1.routes import LMSTUDIO_V1_ERRORS, lmstudio_v1_routes
from engine.server.ollama.routes import OLLAMA_ERRORS
from engine.server.pipeline import Pipeline
from engine.server.responses.store import ResponseStore
from engine.store import ModelStore
from engine.supervisor.states import IDLE
from tests.server.fake_engine import FakeEngine
from tests.server.harness import store_ir_copy

MODEL = "sidelight-demo"


@pytest.fixture
def engine(tiny_model: Path) -> FakeEngine:
    return FakeEngine(model=spec_from_path(tiny_model))


def build_app(
    engine: FakeEngine, chats: Path, api_key: str | None = None, store: ModelStore | None = None
) -> Starlette:
    pipeline = Pipeline(engine, store)
    middleware = [Middleware(ApiKeyMiddleware, api_key=api_key)] if api_key else []
    app = Starlette(
        routes=[
            *lmstudio_routes(pipeline.models),
            *lmstudio_v1_routes(pipeline, engine, ResponseStore(chats)),
        ],
        middleware=middleware,
        exception_handlers={
            APIError: handle_api_error,
            HTTPException: handle_http_exception,
            Exception: handle_unexpected,
        },
    )
    # As in create_app: Ollama's shape covers the other /api paths (LM Studio's v0).
    app.state.error_shapes = ErrorShapes([LMSTUDIO_V1_ERRORS, OLLAMA_ERRORS])
    return app


@pytest.fixture
def http(engine: FakeEngine, tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(build_app(engine, tmp_path / "chats")) as client:
        yield client


def chat(http: TestClient, **fields: Any) -> Any:
    response = http.post("/api/v1/chat", json={"model": MODEL, "input": "Hi", **fields})
    assert response.status_code == 200, response.text
    return response.json()


def stream(http: TestClient, **fields: Any) -> list[tuple[str, Any]]:
    """The stream's (event name, data) pairs; each data's ``type`` is its event name."""
    body = {"model": MODEL, "input": "Hi", "stream": True, **fields}
    response = http.post("/api/v1/chat", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    events = []
    for block in response.text.split("\n\n"):
        if not block:
            continue
        name_line, data_line = block.split("\n")
        name, data = name_line.removeprefix("event: "), json.loads(data_line.removeprefix("data: "))
        assert data["type"] == name
        events.append((name, data))
    return events


def messages_of(engine: FakeEngine, index: int) -> list[dict[str, Any]]:
    messages = engine.submitted[index].messages
    assert messages is not None
    return messages


def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    error: dict[str, Any] = body["error"]
    return error


# ---- chat ----------------------------------------------------------------------------------


def test_whole_chat_is_one_message_with_stats_and_an_id(
    http: TestClient, engine: FakeEngine
) -> None:
    engine.script("Hello", " there")
    result = chat(http)
    assert result["model_instance_id"] == MODEL
    assert result["output"] == [{"type": "message", "content": "Hello there"}]
    stats = result["stats"]
    assert stats["input_tokens"] == 7 and stats["total_output_tokens"] == 2
    assert stats["reasoning_output_tokens"] == 0
    assert set(stats) == {
        "input_tokens",
        "total_output_tokens",
        "reasoning_output_tokens",
        "tokens_per_second",
        "time_to_first_token_seconds",
    }
    assert result["response_id"].startswith("resp_") and len(result["response_id"]) == 53
    (request,) = engine.submitted
    assert request.messages == [{"role": "user", "content": "Hi"}]
    assert request.max_tokens is None  # no limit sent: the worker gives the context's room


def test_stream_events_in_order_and_chat_end_is_the_whole_answer(
    http: TestClient, engine: FakeEngine
) -> None:
    pieces = ("<think>", "Hm", ".</think>", "\n\n", "The", " answer.")
    engine.script(*pieces)
    events = stream(http)
    assert [name for name, _ in events] == [
        "chat.start",
        "prompt_processing.start",
        "prompt_processing.end",
        "reasoning.start",
        *["reasoning.delta"] * sum(e[0] == "reasoning.delta" for e in events),
        "reasoning.end",
        "message.start",
        *["message.delta"] * sum(e[0] == "message.delta" for e in events),
        "message.end",
        "chat.end",
    ]
    assert events[0][1] == {"type": "chat.start", "model_instance_id": MODEL}
    thought = "".join(d["content"] for n, d in events if n == "reasoning.delta")
    said = "".join(d["content"] for n, d in events if n == "message.delta")
    assert (thought, said) == ("Hm.", "The answer.")
    result = events[-1][1]["result"]
    assert result["output"] == [
        {"type": "reasoning", "content": "Hm."},
        {"type": "message", "content": "The answer."},
    ]
    assert result["stats"]["total_output_tokens"] == len(pieces)
    assert 0 < result["stats"]["reasoning_output_tokens"] < len(pieces)
    engine.script(*pieces)
    whole = chat(http)
    assert whole["output"] == result["output"]
    assert whole["stats"]["reasoning_output_tokens"] == result["stats"]["reasoning_output_tokens"]


def test_sampling_and_limits_reach_the_engine(http: TestClient, engine: FakeEngine) -> None:
    chat(
        http,
        temperature=0.5,
        top_p=0.9,
        top_k=20,
        min_p=0.1,
        repeat_penalty=1.1,
        max_output_tokens=5,
        context_length=256,
        system_prompt="Be brief.",
        input=[{"type": "message", "content": "One"}, {"type": "text", "content": "Two"}],
    )
    (request,) = engine.submitted
    sampling = request.sampling
    assert (sampling.temperature, sampling.top_p, sampling.top_k) == (0.5, 0.9, 20)
    assert (sampling.min_p, sampling.repetition_penalty) == (0.1, 1.1)
    assert request.max_tokens == 5
    assert request.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "One\nTwo"},
    ]


def test_reasoning_off_switches_thinking_off(http: TestClient, engine: FakeEngine) -> None:
    chat(http, reasoning="off")
    assert engine.submitted[-1].chat_template_kwargs == {"enable_thinking": False}


def test_reasoning_on_needs_a_reasoning_model(http: TestClient) -> None:
    body = {"model": MODEL, "input": "Hi", "reasoning": "on"}
    error = error_of(http.post("/api/v1/chat", json=body), 400)
    assert error["param"] == "reasoning" and "not a reasoning model" in error["message"]


@pytest.mark.parametrize(
    ("reasoning", "kwargs"),
    [
        ("on", {"enable_thinking": True}),
        ("off", {"enable_thinking": False}),
        ("high", {"enable_thinking": True, "reasoning_effort": "high"}),
    ],
)
def test_a_reasoning_model_takes_each_setting(
    tmp_path: Path, tiny_model: Path, reasoning: str, kwargs: dict[str, Any]
) -> None:
    models = tmp_path / "models"
    store_ir_copy(models, "tiny-reasoner", tiny_model, task="chat", reasoning=True)
    store = ModelStore(models)
    engine = FakeEngine(model=store.spec("tiny-reasoner"))
    app = build_app(engine, tmp_path / "chats", store=store)
    with TestClient(app) as http:
        (entry,) = http.get("/api/v1/models").json()["models"]
        assert entry["capabilities"]["reasoning"] == {
            "allowed_options": ["off", "on"],
            "default": "on",
        }
        body = {"model": "tiny-reasoner", "input": "Hi", "reasoning": reasoning}
        assert http.post("/api/v1/chat", json=body).status_code == 200
    assert engine.submitted[-1].chat_template_kwargs == kwargs


def test_a_stored_chat_continues_and_a_new_system_prompt_replaces_the_old(
    http: TestClient, engine: FakeEngine
) -> None:
    engine.script("Blue is nice.")
    first = chat(http, input="My favorite color is blue.", system_prompt="Be kind.")
    engine.script("Blue.")
    second = chat(http, input="Which color?", previous_response_id=first["response_id"])
    assert second["response_id"] != first["response_id"]
    assert engine.submitted[1].messages == [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "My favorite color is blue."},
        {"role": "assistant", "content": "Blue is nice."},
        {"role": "user", "content": "Which color?"},
    ]
    # Branching from the first response again, with another system prompt.
    chat(
        http,
        input="And mine?",
        previous_response_id=first["response_id"],
        system_prompt="Be terse.",
        stream=False,
    )
    branched, continued = messages_of(engine, 2), messages_of(engine, 1)
    assert branched[0] == {"role": "system", "content": "Be terse."}
    assert branched[1:3] == continued[1:3]


def test_a_streamed_chat_is_stored_too_and_keeps_its_reasoning(
    http: TestClient, engine: FakeEngine
) -> None:
    engine.script("<think>Hm.</think>", "Yes.")
    result = stream(http)[-1][1]["result"]
    chat(http, input="Again", previous_response_id=result["response_id"])
    assert messages_of(engine, 1)[1] == {
        "role": "assistant",
        "content": "Yes.",
        "reasoning_content": "Hm.",
    }


def test_store_false_gives_no_id(http: TestClient) -> None:
    assert "response_id" not in chat(http, store=False)
    events = stream(http, store=False)
    assert "response_id" not in events[-1][1]["result"]


def test_unknown_previous_response_is_a_404(http: TestClient) -> None:
    missing = "resp_" + "0" * 48
    error = error_of(
        http.post(
            "/api/v1/chat", json={"model": MODEL, "input": "x", "previous_response_id": missing}
        ),
        404,
    )
    assert error["param"] == "previous_response_id" and missing in error["message"]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"model": ""}, "model"),
        ({"input": []}, "input"),
        ({"input": 5}, "input"),
        ({"input": [{"content": "x"}]}, "input.0.type"),
        ({"input": [{"type": "message", "content": 5}]}, "input.0.content"),
        ({"input": [{"type": "message"}]}, "input.0.content"),
        ({"input": [{"type": "image"}]}, "input.0.data_url"),
        ({"input": [{"type": "image", "data_url": "https://x/a.png"}]}, "input.0.data_url"),
        ({"input": [{"type": "file", "content": "x"}]}, "input.0.type"),
        ({"temperature": -1}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": 2**64}, "top_k"),
        ({"min_p": -0.1}, "min_p"),
        ({"repeat_penalty": 0}, "repeat_penalty"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"reasoning": "maybe"}, "reasoning"),
        ({"context_length": 0}, "context_length"),
        ({"context_length": 10**9}, "context_length"),
        ({"integrations": ["mcp/playwright"]}, "integrations"),
        ({"previous_response_id": "abc"}, "previous_response_id"),
        ({"store": "sometimes"}, "store"),
    ],
)
def test_bad_fields_are_a_400_naming_them(
    http: TestClient, engine: FakeEngine, fields: dict[str, Any], param: str
) -> None:
    for streamed in (False, True):
        body = {"model": MODEL, "input": "Hi", "stream": streamed, **fields}
        error = error_of(http.post("/api/v1/chat", json=body), 400)
        assert error["type"] == "invalid_request"
        assert error["param"] == param and error["message"].startswith(f"{param}: ")
    assert not engine.submitted


def test_unknown_fields_are_ignored(http: TestClient) -> None:
    assert chat(http, ttl=300, draft_model=None)["output"]


def test_unknown_model_is_a_404_before_any_event(http: TestClient) -> None:
    for streamed in (False, True):
        body = {"model": "nope", "input": "Hi", "stream": streamed}
        error = error_of(http.post("/api/v1/chat", json=body), 404)
        assert error["type"] == "model_not_found" and error["param"] == "model"


def test_a_failure_mid_stream_is_an_error_event_then_chat_end(
    http: TestClient, engine: FakeEngine
) -> None:
    engine.script("Hel", "lo", error="the worker died")
    events = stream(http)
    names = [name for name, _ in events]
    assert names[-3:] == ["message.end", "error", "chat.end"]
    error = events[-2][1]["error"]
    assert error["type"] == "internal_error" and error["message"] == "the worker died"
    result = events[-1][1]["result"]
    assert result["output"] == [{"type": "message", "content": "Hello"}]
    assert "response_id" not in result  # a broken reply is not kept
    engine.script("Hel", "lo", error="the worker died")
    whole = error_of(http.post("/api/v1/chat", json={"model": MODEL, "input": "Hi"}), 503)
    assert whole["message"] == "the worker died"


def test_a_chat_that_loads_its_model_reports_the_load(http: TestClient, engine: FakeEngine) -> None:
    assert http.post("/api/v1/models/unload", json={"instance_id": MODEL}).status_code == 200
    events = stream(http)
    names = [name for name, _ in events]
    assert names[:4] == [
        "chat.start",
        "model_load.start",
        "model_load.end",
        "prompt_processing.start",
    ]
    assert events[2][1]["model_instance_id"] == MODEL
    assert events[2][1]["load_time_seconds"] >= 0
    assert "model_load_time_seconds" in events[-1][1]["result"]["stats"]
    assert [spec.id for spec in engine.loads] == [MODEL]
    # Loaded now: the next chat does not report a load.
    assert "model_load_time_seconds" not in chat(http)["stats"]


# ---- models ----------------------------------------------------------------------------


def test_models_list_the_loaded_instance(http: TestClient) -> None:
    (entry,) = http.get("/api/v1/models").json()["models"]
    assert entry["type"] == "llm" and entry["key"] == MODEL and entry["display_name"] == MODEL
    assert entry["loaded_instances"] == [{"id": MODEL, "config": {"context_length": 2048}}]
    assert entry["format"] is None  # OpenVINO IR is none of gguf/mlx
    assert entry["architecture"] and entry["max_context_length"] > 0
    assert entry["size_bytes"] > 0
    assert entry["capabilities"]["vision"] is False
    assert set(entry["capabilities"]) <= {"vision", "trained_for_tool_use", "reasoning"}
    quantization = entry["quantization"]
    assert quantization is None or set(quantization) == {"name", "bits_per_weight"}


def test_load_unload_and_load_again(http: TestClient, engine: FakeEngine) -> None:
    loaded = http.post("/api/v1/models/load", json={"model": MODEL, "echo_load_config": True})
    assert loaded.status_code == 200, loaded.text
    answer = loaded.json()
    assert answer["type"] == "llm" and answer["instance_id"] == MODEL
    assert answer["status"] == "loaded" and answer["load_time_seconds"] >= 0
    assert answer["load_config"] == {"context_length": 2048}
    assert "load_config" not in http.post("/api/v1/models/load", json={"model": MODEL}).json()

    unloaded = http.post("/api/v1/models/unload", json={"instance_id": MODEL})
    assert unloaded.status_code == 200 and unloaded.json() == {"instance_id": MODEL}
    assert engine.state == IDLE and engine.model is None
    again = http.post("/api/v1/models/unload", json={"instance_id": MODEL})
    assert error_of(again, 404)["param"] == "instance_id"

    assert http.post("/api/v1/models/load", json={"model": MODEL}).status_code == 200
    assert [spec.id for spec in engine.loads] == [MODEL]
    (entry,) = http.get("/api/v1/models").json()["models"]
    assert entry["loaded_instances"][0]["id"] == MODEL


def test_load_refusals(http: TestClient) -> None:
    error = error_of(http.post("/api/v1/models/load", json={"model": "nope"}), 404)
    assert error["type"] == "model_not_found" and error["param"] == "model"
    error = error_of(
        http.post("/api/v1/models/load", json={"model": MODEL, "context_length": 10**9}), 400
    )
    assert error["param"] == "context_length"
    error = error_of(http.post("/api/v1/models/load", json={}), 400)
    assert error["param"] == "model"
    error = error_of(http.post("/api/v1/models/unload", json={"instance_id": "other"}), 404)
    assert error["param"] == "instance_id"


def test_downloads_are_not_implemented(http: TestClient) -> None:
    for method, path in [
        ("POST", "/api/v1/models/download"),
        ("GET", "/api/v1/models/download/status/job_1"),
    ]:
        error = error_of(http.request(method, path, json={"model": "x"}), 501)
        assert error["type"] == "not_implemented" and "sidelight pull" in error["message"]


def test_wrong_methods_and_paths_answer_in_lm_studio_shape(http: TestClient) -> None:
    error = error_of(http.get("/api/v1/chat"), 405)
    assert error["message"] == "method GET is not allowed on /api/v1/chat"
    error = error_of(http.post("/api/v1/nothing", json={}), 404)
    assert error["message"] == "no route for POST /api/v1/nothing"


def test_middleware_refusals_use_each_api_shape(engine: FakeEngine, tmp_path: Path) -> None:
    with TestClient(build_app(engine, tmp_path, api_key="secret")) as http:
        error = error_of(http.get("/api/v1/models"), 401)
        assert error["type"] == "invalid_request" and error["message"]
        # LM Studio's older API keeps its plain string.
        assert isinstance(http.get("/api/v0/models").json()["error"], str)
        headers = {"Authorization": "Bearer secret"}
        assert http.get("/api/v1/models", headers=headers).status_code == 200
