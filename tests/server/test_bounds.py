"""Bounds on what the server keeps and says back of a request (issue 25, findings 2, 7, 10).

Unit level, no engine: the echo helper, the request log's byte budget, the log file's line
bound, the Responses store's owners and fair eviction, the Responses per-field bounds (over a
scripted pipeline: what is tested is the serving layer, not generation), booleans refused
wherever a number stands in any dialect, ASCII-only durations, hosted tools and the field a
context error names. The real server runs the same attacks in test_bounds_e2e.py.
"""

from __future__ import annotations

import inspect
import io
import logging
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.testclient import TestClient

import engine.server.anthropic.protocol as anthropic_protocol
import engine.server.lmstudio_v1.protocol as lmstudio_protocol
import engine.server.ollama.protocol as ollama_protocol
import engine.server.openai.protocol as openai_protocol
import engine.server.rerank.protocol as rerank_protocol
import engine.server.responses.protocol as responses_protocol
from engine.echo import LOG_LINE_BYTES, MARKER, MESSAGE_BYTES, clip
from engine.logs import BoundedLines
from engine.server.errors import APIError, handle_api_error, handle_http_exception
from engine.server.keep_alive import parse_keep_alive
from engine.server.monitor import RequestMonitor, note_model
from engine.server.monitor.log import RequestLog
from engine.server.monitor.monitor import bind, unbind
from engine.server.monitor.record import OpenRequest
from engine.server.pipeline.engine import request_failed
from engine.server.responses.objects import new_id
from engine.server.responses.protocol import parse_request
from engine.server.responses.routes import responses_routes
from engine.server.responses.store import ResponseStore, StoredResponse, owner_of
from engine.server.responses.translate import translate
from engine.supervisor.states import EngineStatus, RequestFailed
from tests.server.scripted_pipeline import ScriptedPipeline, reply

GIANT = "x" * 10_000_000


# ---- the echo helper ----------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "short", "é" * 64, "名" * 85])
def test_text_that_fits_is_echoed_whole(text: str) -> None:
    assert clip(text) == text


@pytest.mark.parametrize(
    ("text", "limit"), [(GIANT, 256), ("é" * 5000, 256), ("名🙂" * 9000, 2048)]
)
def test_longer_text_is_cut_on_a_character_within_the_limit(text: str, limit: int) -> None:
    clipped = clip(text, limit)
    assert len(clipped.encode("utf-8")) <= limit
    assert MARKER in clipped and f"({len(text)} characters)" in clipped
    assert text.startswith(clipped.split(MARKER)[0])


def test_api_errors_clip_their_message_and_param() -> None:
    error = APIError(404, f"The model '{GIANT}' does not exist", param=GIANT)
    assert len(error.message.encode()) <= MESSAGE_BYTES and MARKER in error.message
    assert error.param is not None and len(error.param) <= 256


# ---- the request log and the log file ------------------------------------------------------


def status() -> EngineStatus:
    return EngineStatus(state="ready")


def test_the_request_log_clips_what_the_client_chose() -> None:
    monitor = RequestMonitor(status)
    request = monitor.open(dialect="openai", method="POST", route="/x", user_agent=GIANT)
    token = bind(request)
    try:
        note_model(requested=GIANT)
    finally:
        unbind(token)
    entry = monitor.close(request, 404, error=f"The model '{GIANT}' does not exist")
    for text in (entry.requested_model, entry.user_agent, entry.error):
        assert text is not None and MARKER in text and len(text.encode()) <= MESSAGE_BYTES
    assert monitor.log.text_bytes < 8 * 1024


def test_the_request_log_is_bounded_in_bytes_not_only_entries() -> None:
    """Entries holding more text than the budget push the oldest out, whatever the count."""
    log = RequestLog(capacity=500, text_budget=1_000_000)
    for _ in range(50):
        request = OpenRequest(dialect="openai", method="POST", route="/x")
        request.requested_model = "m" * 100_000  # unclipped: the budget is the last guard
        log.finished(request, 404, "client_error", None)
    assert log.text_bytes <= 1_000_000
    assert 5 <= len(log.entries()) <= 10


def test_a_log_line_is_bounded() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(BoundedLines())
    logger = logging.getLogger("tests.bounds")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("error=%s", "e" * 20_000_000)
        logger.warning("small %s", "line")
    finally:
        logger.removeHandler(handler)
    first, second = out.getvalue().splitlines()
    assert len(first.encode()) <= LOG_LINE_BYTES and MARKER in first
    assert second == "small line"


# ---- the Responses store: owners and fair eviction ----------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        self.now += 1  # each save is a second younger than the last
        return self.now


def stored(text: str = "Hi!") -> StoredResponse:
    item = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text}],
    }
    return StoredResponse({"id": new_id("resp"), "output": [item]}, [])


def test_an_owner_is_a_hash_of_the_key() -> None:
    assert owner_of(None) is None and owner_of("") is None
    alice, bob = owner_of("alice-key"), owner_of("bob-key")
    assert alice is not None and bob is not None and alice != bob
    assert "alice" not in alice and len(alice) == 32


def test_only_the_owner_finds_a_response(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path)
    alice, bob = owner_of("alice-key"), owner_of("bob-key")
    kept = stored()
    assert store.save(kept, alice)
    assert (tmp_path / str(alice) / f"{kept.id}.json").is_file()
    assert store.load(kept.id, alice) == kept
    assert store.load(kept.id, bob) is None and store.load(kept.id) is None
    assert store.delete(kept.id, bob) is False and store.delete(kept.id) is False
    again = ResponseStore(tmp_path)  # the owners' folders are found on a fresh start
    assert again.load(kept.id, alice) == kept
    assert again.delete(kept.id, alice) is True
    assert again.load(kept.id, alice) is None


def test_one_owner_writing_much_evicts_only_its_own(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path, max_count=10, clock=Clock())
    alice, mallory = owner_of("alice-key"), owner_of("mallory-key")
    alices = [stored(f"alice {i}") for i in range(3)]
    for kept in alices:
        store.save(kept, alice)
    flood = [stored(f"flood {i}") for i in range(50)]
    for kept in flood:
        store.save(kept, mallory)
    assert all(store.load(k.id, alice) == k for k in alices)
    assert store.usage(mallory)[0] == 7
    assert [store.load(k.id, mallory) is not None for k in flood[-7:]] == [True] * 7
    assert store.load(flood[0].id, mallory) is None  # its own oldest went first


def test_the_largest_share_goes_first_by_bytes(tmp_path: Path) -> None:
    one = len(stored("x" * 1000).response["output"][0]["content"][0]["text"]) + 200
    store = ResponseStore(tmp_path, max_bytes=one * 12, clock=Clock())
    alice, mallory = owner_of("alice-key"), owner_of("mallory-key")
    alices = [stored("x" * 1000) for _ in range(4)]
    for kept in alices:
        store.save(kept, alice)
    for _ in range(30):
        store.save(stored("y" * 3000), mallory)
    assert all(store.load(k.id, alice) is not None for k in alices)
    assert store.usage(alice)[1] + store.usage(mallory)[1] <= store.max_bytes


def test_a_response_over_the_per_response_bound_is_not_kept(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path, max_response_bytes=10_000)
    assert store.save(stored("z" * 20_000)) is False
    assert store.save(stored("z" * 100)) is True


# ---- Responses: per-field bounds and owners over HTTP -------------------------------------


def app(store: ResponseStore, owner: str | None = None) -> Starlette:
    return Starlette(
        routes=responses_routes(ScriptedPipeline(reply("Hi!")), store, owner=owner),
        exception_handlers={APIError: handle_api_error, HTTPException: handle_http_exception},
    )


@pytest.fixture
def small_store(tmp_path: Path) -> ResponseStore:
    """A store whose responses may be 64 KiB (so half of it is the request's room)."""
    return ResponseStore(tmp_path / "responses", max_response_bytes=64 * 1024)


@pytest.fixture
def http(small_store: ResponseStore) -> Iterator[TestClient]:
    with TestClient(app(small_store)) as client:
        yield client


BIG = "b" * 100_000
WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"input": [{"role": "user", "content": "Hi"}, {"role": "user", "content": BIG}]}, "input.1"),
        ({"instructions": BIG}, "instructions"),
        ({"tools": [{**WEATHER, "description": BIG}]}, "tools"),
        ({"text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object", "description": BIG}}}}, "text.format"),
    ],
)  # fmt: skip
def test_a_response_too_large_to_store_is_400_naming_the_field(
    http: TestClient, small_store: ResponseStore, fields: dict[str, Any], param: str
) -> None:
    body = {"model": "m", "input": "Hello", **fields}
    response = http.post("/v1/responses", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["code"] == "response_too_large", error
    assert not list(small_store.root.glob("*.json")) if small_store.root.exists() else True
    unstored = http.post("/v1/responses", json={**body, "store": False})
    assert unstored.status_code == 200, unstored.text


def test_user_is_bounded_in_bytes(http: TestClient) -> None:
    for user, status in (("u" * 256, 200), ("é" * 129, 400), ("u" * 8_000_000, 400)):
        response = http.post("/v1/responses", json={"model": "m", "input": "Hi", "user": user})
        assert response.status_code == status, response.text[:300]
        if status == 400:
            assert response.json()["error"]["param"] == "user"


def test_another_key_gets_404(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path)
    with (
        TestClient(app(store, owner_of("alice-key"))) as alice,
        TestClient(app(store, owner_of("bob-key"))) as bob,
        TestClient(app(store)) as nobody,
    ):
        created = alice.post("/v1/responses", json={"model": "m", "input": "Hi"}).json()
        path = f"/v1/responses/{created['id']}"
        assert alice.get(path).status_code == 200
        for other in (bob, nobody):
            assert other.get(path).status_code == 404
            assert other.delete(path).status_code == 404
            follow = {"model": "m", "input": "Go on", "previous_response_id": created["id"]}
            refused = other.post("/v1/responses", json=follow)
            assert refused.status_code == 404
            assert refused.json()["error"]["param"] == "previous_response_id"
        assert alice.delete(path).status_code == 200


def test_echoed_fields_drop_what_sidelight_did_not_read() -> None:
    junk = {"junk": "j" * 1000}
    body = parse_request(
        {
            "model": "m",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi", **junk}], **junk}],
            "tools": [{**WEATHER, **junk}],
            "tool_choice": {"type": "function", "name": "get_weather", **junk},
        }
    )  # fmt: skip
    turn = translate(body)
    assert "junk" not in str(turn.context) and "junk" not in str(turn.tools)
    assert turn.context == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}
    ]


# ---- booleans are not numbers, in any dialect ---------------------------------------------

_PROTOCOLS = (
    openai_protocol,
    anthropic_protocol,
    ollama_protocol,
    lmstudio_protocol,
    rerank_protocol,
    responses_protocol,
)


def _bool_values(annotation: Any) -> list[Any]:
    """``True`` where ``annotation`` takes a number (``[True]`` for a list of them)."""
    found: list[Any] = []

    def walk(kind: Any, wrap: Any) -> None:
        origin = typing.get_origin(kind)
        if origin is typing.Annotated:
            walk(typing.get_args(kind)[0], wrap)
        elif kind is int or kind is float:
            found.append(wrap(True))
        elif origin in (typing.Union, types.UnionType):
            for member in typing.get_args(kind):
                walk(member, wrap)
        elif origin is list:
            walk(typing.get_args(kind)[0], lambda value: wrap([value]))

    walk(annotation, lambda value: value)
    return found


def _number_fields() -> list[tuple[type[BaseModel], str, Any]]:
    fields = []
    for module in _PROTOCOLS:
        for model in vars(module).values():
            if not (inspect.isclass(model) and issubclass(model, BaseModel)):
                continue
            if model.__module__ != module.__name__:
                continue
            for name, info in model.model_fields.items():
                for value in _bool_values(info.annotation):
                    fields.append((model, info.alias or name, value))
    return fields


NUMBER_FIELDS = _number_fields()


def test_every_dialect_has_number_fields_to_check() -> None:
    names = {f"{model.__module__.split('.')[-2]}.{name}" for model, name, _ in NUMBER_FIELDS}
    for expected in (
        "responses.max_output_tokens",
        "openai.max_tokens",
        "anthropic.max_tokens",
        "ollama.num_predict",
        "lmstudio_v1.max_output_tokens",
        "rerank.top_n",
    ):
        assert expected in names


@pytest.mark.parametrize(
    ("model", "name", "value"),
    NUMBER_FIELDS,
    ids=[f"{m.__name__}.{n}" for m, n, _ in NUMBER_FIELDS],
)
def test_a_boolean_is_refused_where_a_number_stands(
    model: type[BaseModel], name: str, value: Any
) -> None:
    with pytest.raises(ValidationError) as info:
        model.model_validate({name: value})
    refused = [e for e in info.value.errors() if e["loc"][:1] == (name,) and e["type"] != "missing"]
    assert refused, f"{model.__name__}.{name} took {value!r}"


# ---- durations, hosted tools, the context error's field -----------------------------------


@pytest.mark.parametrize(
    "value", ["\u0663s", "\u0663", "\u06f5m", "\uff13s", "1h\u0663m", "\u00b2"]
)
def test_durations_take_ascii_digits_only(value: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        parse_keep_alive(value)


@pytest.mark.parametrize("value", ["9" * 5_000_000 + "x", "1h" * 1_000_000 + "x"])
def test_a_giant_duration_is_refused_at_once_and_echoed_clipped(value: str) -> None:
    """Once quadratic: 5 MB of digits held the test for more than 300 s."""
    with pytest.raises(ValueError) as info:
        parse_keep_alive(value)
    assert len(str(info.value)) < 1024 and MARKER in str(info.value)


@pytest.mark.parametrize(
    "kind", ["mcp", "file_search", "code_interpreter", "image_generation", "computer_use_preview"]
)
def test_tools_openai_runs_are_refused_naming_the_tool(kind: str) -> None:
    with pytest.raises(APIError) as info:
        parse_request({"model": "m", "input": "Hi", "tools": [WEATHER, {"type": kind}]})
    assert info.value.param == "tools.1.type" and kind in info.value.message


def test_web_search_is_still_left_out() -> None:
    """Codex offers it on every request (see test_plugin_replays): refusing it would refuse
    Codex; it is left out of what the model is offered, as before."""
    turn = translate(
        parse_request({"model": "m", "input": "Hi", "tools": [{"type": "web_search"}]})
    )
    assert turn.request.tools == [] and turn.tools == []


def test_the_context_error_names_the_responses_field() -> None:
    request = translate(parse_request({"model": "m", "input": "Hi"})).request
    for engine_param, param in (("messages", "input"), ("max_tokens", "max_output_tokens")):
        failure = RequestFailed("context_length_exceeded", "too long", engine_param)
        assert request_failed(failure, field_names=request.field_names).param == param
    assert request_failed(RequestFailed("context_length_exceeded", "x", "messages")).param == (
        "messages"
    )
