"""``/v1/responses`` over a scripted pipeline: event sequences, function-call streaming,
reasoning, failures, the store behind ``previous_response_id``, GET and DELETE, and the
``openai`` SDK reading it all.

Every streamed event and every response object is also validated against the SDK's own
types (``ResponseStreamEvent``, ``Response``), so a missing or misspelt field fails here.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.testclient import TestClient
from starlette.types import Message

from engine.parsing import ContentDelta
from engine.server.errors import APIError, handle_api_error, handle_http_exception
from engine.server.pipeline import Logprobs
from engine.server.responses.routes import responses_routes
from engine.server.responses.store import ResponseStore, StoredResponse
from tests.server.scripted_pipeline import Script, ScriptedPipeline, reply

EVENT = TypeAdapter(ResponseStreamEvent)
STREAMED = {"model": "m", "input": "Hello", "stream": True}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def build_app(pipeline: ScriptedPipeline, store: ResponseStore) -> Starlette:
    return Starlette(
        routes=responses_routes(pipeline, store),
        exception_handlers={APIError: handle_api_error, HTTPException: handle_http_exception},
    )


class Server:
    def __init__(self, root: Path, *scripts: Script) -> None:
        self.pipeline = ScriptedPipeline(*scripts)
        self.store = ResponseStore(root)
        self.http = TestClient(build_app(self.pipeline, self.store))

    def post(self, **body: Any) -> Any:
        return self.http.post("/v1/responses", json={"model": "m", "input": "Hello", **body})

    def stream(self, **body: Any) -> list[dict[str, Any]]:
        """The events of a streamed response, each checked against the SDK's types."""
        events = []
        with self.http.stream(
            "POST", "/v1/responses", json={"model": "m", "input": "Hello", "stream": True, **body}
        ) as response:
            assert response.status_code == 200, response.read()
            assert response.headers["content-type"].startswith("text/event-stream")
            lines = [line for line in response.iter_lines() if line]
        for name, data in zip(lines[::2], lines[1::2], strict=True):
            event = json.loads(data.removeprefix("data: "))
            assert name == f"event: {event['type']}"
            EVENT.validate_python(event)
            events.append(event)
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        return events


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Any]:
    servers: list[Server] = []

    def build(*scripts: Script) -> Server:
        servers.append(Server(tmp_path / "responses", *scripts))
        return servers[-1]

    yield build
    for server in servers:
        server.http.close()


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"].removeprefix("response.") for e in events]


# ---- whole answers -----------------------------------------------------------------------


def test_a_whole_answer(make: Any) -> None:
    server = make(reply("Hello there!"))
    response = server.post(temperature=0.5, metadata={"k": "v"})
    assert response.status_code == 200
    body = response.json()
    Response.model_validate(body)
    assert body["id"].startswith("resp_") and body["object"] == "response"
    assert body["status"] == "completed" and body["model"] == "scripted-model"
    (message,) = body["output"]
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["content"][0]["text"] == "Hello there!"
    assert body["usage"]["input_tokens"] == 7 and body["usage"]["output_tokens"] == 5
    assert body["usage"]["total_tokens"] == 12
    assert body["temperature"] == 0.5 and body["metadata"] == {"k": "v"} and body["store"] is True


def test_a_whole_answer_with_thinking_and_calls(make: Any) -> None:
    script = reply(reasoning="Paris, so weather.", calls=(("get_weather", '{"city":"Paris"}'),))
    body = make(script).post(tools=[WEATHER], reasoning={"summary": "auto"}).json()
    Response.model_validate(body)
    thinking, call = body["output"]
    assert thinking["type"] == "reasoning"
    assert thinking["summary"] == [{"type": "summary_text", "text": "Paris, so weather."}]
    assert call["type"] == "function_call" and call["status"] == "completed"
    assert (call["name"], call["arguments"], call["call_id"]) == (
        "get_weather",
        '{"city":"Paris"}',
        "call_0",
    )
    assert body["tools"] == [WEATHER]


def test_the_token_limit_makes_the_response_incomplete(make: Any) -> None:
    body = make(reply("one two", finish="length")).post(max_output_tokens=2).json()
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][0]["status"] == "incomplete"


def test_an_empty_answer_is_still_a_message(make: Any) -> None:
    body = make(reply("")).post().json()
    assert [item["type"] for item in body["output"]] == ["message"]
    assert body["output"][0]["content"][0]["text"] == ""


def test_logprobs_when_included(make: Any) -> None:
    events = reply("Hi").events
    script = Script([*events[:-1], Logprobs((("Hi", -0.5),)), events[-1]])
    body = make(script).post(include=["message.output_text.logprobs"]).json()
    (logprob,) = body["output"][0]["content"][0]["logprobs"]
    assert (logprob["token"], logprob["logprob"], logprob["bytes"]) == ("Hi", -0.5, [72, 105])


# ---- streams -----------------------------------------------------------------------------


def test_a_streamed_answer(make: Any) -> None:
    events = make(reply("Hello there!")).stream()
    assert kinds(events) == [
        "created",
        "in_progress",
        "output_item.added",
        "content_part.added",
        "output_text.delta",
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "completed",
    ]
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == "Hello there!"
    assert (
        events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    )
    item_ids = {e["item_id"] for e in events if "item_id" in e}
    assert item_ids == {events[2]["item"]["id"]}
    final = events[-1]["response"]
    assert final["id"] == events[0]["response"]["id"] and final["output"] == [events[-2]["item"]]


def test_streamed_function_calls(make: Any) -> None:
    calls = (("get_weather", '{"city":"Paris"}'), ("get_weather", '{"city":"Rome"}'))
    events = make(reply("Checking.", calls=calls)).stream(tools=[WEATHER])
    assert kinds(events)[9:] == [
        "output_item.added",
        "function_call_arguments.delta",
        "function_call_arguments.delta",
        "function_call_arguments.done",
        "output_item.done",
        "output_item.added",
        "function_call_arguments.delta",
        "function_call_arguments.delta",
        "function_call_arguments.done",
        "output_item.done",
        "completed",
    ]
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert [e["output_index"] for e in added] == [0, 1, 2]
    first_call = added[1]["item"]
    assert first_call["arguments"] == "" and first_call["status"] == "in_progress"
    deltas = [e for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert {e["item_id"] for e in deltas[:2]} == {first_call["id"]}
    assert "".join(e["delta"] for e in deltas[:2]) == '{"city":"Paris"}'
    final = events[-1]["response"]["output"]
    assert [(i["type"], i.get("arguments")) for i in final] == [
        ("message", None),
        ("function_call", '{"city":"Paris"}'),
        ("function_call", '{"city":"Rome"}'),
    ]


def test_namespaced_calls_name_their_namespace(make: Any) -> None:
    spawn = {"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}}
    tools = [
        {"type": "namespace", "name": "agents", "description": "Sub-agents.", "tools": [spawn]}
    ]
    events = make(reply(calls=(("spawn_agent", "{}"),))).stream(tools=tools)
    assert events[-1]["response"]["output"][0]["namespace"] == "agents"


@pytest.mark.parametrize(
    ("reasoning", "expected"),
    [
        (
            {"summary": "auto"},
            [
                "reasoning_summary_part.added",
                "reasoning_summary_text.delta",
                "reasoning_summary_text.delta",
                "reasoning_summary_text.done",
                "reasoning_summary_part.done",
            ],
        ),
        (
            None,
            [
                "content_part.added",
                "reasoning_text.delta",
                "reasoning_text.delta",
                "reasoning_text.done",
                "content_part.done",
            ],
        ),
    ],
)
def test_streamed_thinking(make: Any, reasoning: Any, expected: list[str]) -> None:
    events = make(reply("4.", reasoning="2 plus 2.")).stream(reasoning=reasoning)
    assert kinds(events)[2:9] == ["output_item.added", *expected, "output_item.done"]
    thinking = events[8]["item"]
    text = "".join(e["delta"] for e in events if e["type"].endswith("text.delta")) or ""
    assert text.startswith("2 plus 2.")
    if reasoning:
        assert thinking["summary"] == [{"type": "summary_text", "text": "2 plus 2."}]
    else:
        assert thinking["content"] == [{"type": "reasoning_text", "text": "2 plus 2."}]
    assert events[-1]["response"]["output"][1]["content"][0]["text"] == "4."


def test_an_engine_failure_mid_stream_is_response_failed(make: Any) -> None:
    failure = APIError(503, "the engine crashed", code="engine_error")
    server = make(Script([ContentDelta("Hel")], failure=failure))
    events = server.stream()
    assert kinds(events)[-1] == "failed"
    response = events[-1]["response"]
    assert response["status"] == "failed"
    assert response["error"] == {"code": "server_error", "message": "the engine crashed"}
    stored = server.http.get(f"/v1/responses/{response['id']}").json()
    assert stored["status"] == "failed"


def test_errors_before_the_stream_are_plain_http_errors(make: Any) -> None:
    refusal = APIError(
        400, "the prompt is too long", param="messages", code="context_length_exceeded"
    )
    response = make(Script(refusal=refusal)).post(stream=True)
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == "context_length_exceeded"


def test_a_bad_request_never_reaches_the_pipeline(make: Any) -> None:
    server = make()
    response = server.post(tools=[{"type": "custom", "name": "apply_patch"}])
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "tools.0.type" and error["type"] == "invalid_request_error"
    assert server.pipeline.requests == []


# ---- the store ---------------------------------------------------------------------------


def test_previous_response_id_continues_the_conversation(make: Any) -> None:
    calls = (("get_weather", '{"city":"Paris"}'),)
    server = make(reply(calls=calls), reply("Sunny, 22 C."), reply("You are welcome."))
    first = server.post(tools=[WEATHER], instructions="Be brief.").json()
    output = [{"type": "function_call_output", "call_id": "call_0", "output": "22 C, sunny"}]
    second = server.stream(previous_response_id=first["id"], input=output, tools=[WEATHER])
    second_id = second[-1]["response"]["id"]
    third = server.post(previous_response_id=second_id, input="Thanks!").json()
    assert third["previous_response_id"] == second_id
    call = {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}  # fmt: skip
    assert server.pipeline.requests[2].messages == [
        {"role": "user", "content": "Hello"},  # instructions do not carry over
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "content": "22 C, sunny"},
        {"role": "assistant", "content": "Sunny, 22 C."},
        {"role": "user", "content": "Thanks!"},
    ]
    assert server.pipeline.requests[0].messages[0] == {"role": "system", "content": "Be brief."}


def test_get_and_delete(make: Any) -> None:
    server = make(reply("Hi!"))
    created = server.post().json()
    fetched = server.http.get(f"/v1/responses/{created['id']}")
    assert fetched.status_code == 200 and fetched.json() == created
    deleted = server.http.delete(f"/v1/responses/{created['id']}")
    assert deleted.json() == {"id": created["id"], "object": "response.deleted", "deleted": True}
    for response in (
        server.http.get(f"/v1/responses/{created['id']}"),
        server.http.delete(f"/v1/responses/{created['id']}"),
        server.post(previous_response_id=created["id"]),
    ):
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "response_not_found"
    assert server.post(previous_response_id="resp_nope").json()["error"]["param"] == (
        "previous_response_id"
    )


def test_store_false_keeps_nothing(make: Any) -> None:
    server = make(reply("Hi!"))
    created = server.post(store=False).json()
    assert created["store"] is False
    assert server.http.get(f"/v1/responses/{created['id']}").status_code == 404
    streamed = server.stream(store=False)[-1]["response"]
    assert server.http.get(f"/v1/responses/{streamed['id']}").status_code == 404
    assert not server.store.root.exists() or not list(server.store.root.iterdir())


class _Asgi:
    """Drives the app by hand: the body chunks it sends, and a client that can leave."""

    def __init__(self, app: Starlette, body: dict[str, Any], leave_after: int | None) -> None:
        self.app = app
        self.request = json.dumps(body).encode()
        self.leave_after = leave_after
        self.chunks: list[bytes] = []
        self._sent = asyncio.Event()
        self._asked = False

    async def run(self) -> None:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/responses",
            "raw_path": b"/v1/responses",
            "query_string": b"",
            "root_path": "",
            "headers": [(b"content-type", b"application/json"), (b"host", b"testserver")],
            "client": ("127.0.0.1", 1),
            "server": ("testserver", 80),
        }
        await asyncio.wait_for(self.app(scope, self._receive, self._send), timeout=30)

    async def _receive(self) -> dict[str, Any]:
        if not self._asked:
            self._asked = True
            return {"type": "http.request", "body": self.request, "more_body": False}
        while self.leave_after is None or len(self.chunks) < self.leave_after:
            self._sent.clear()
            await self._sent.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: Message) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            self.chunks.append(message["body"])
            self._sent.set()


async def test_a_stream_is_stored_before_it_says_completed(tmp_path: Path) -> None:
    chunks: list[bytes] = []

    class CheckingStore(ResponseStore):
        def save(self, stored: StoredResponse, owner: str | None = None) -> bool:
            # A client may send previous_response_id as soon as it reads response.completed.
            assert not any(b"response.completed" in chunk for chunk in chunks)
            return super().save(stored, owner)

    store = CheckingStore(tmp_path)
    driver = _Asgi(build_app(ScriptedPipeline(reply("Hi!")), store), STREAMED, None)
    driver.chunks = chunks
    await driver.run()
    assert b"response.completed" in chunks[-1]
    assert len(list(tmp_path.glob("resp_*.json"))) == 1


async def test_a_client_that_leaves_cancels_the_generation(tmp_path: Path) -> None:
    pipeline = ScriptedPipeline(Script([ContentDelta("Hel")], hang=True))
    driver = _Asgi(build_app(pipeline, ResponseStore(tmp_path)), STREAMED, leave_after=3)
    await driver.run()
    assert pipeline.generations[0].cancelled
    assert not list(tmp_path.glob("resp_*.json"))  # a response cut short is not kept


# ---- the openai SDK ----------------------------------------------------------------------


def test_the_openai_sdk_reads_whole_and_streamed_responses(make: Any) -> None:
    calls = (("get_weather", '{"city":"Paris"}'),)
    server = make(reply(calls=calls), reply("Sunny.", reasoning="Easy."), reply("Bye."))
    client = openai.OpenAI(
        base_url="http://testserver/v1", api_key="unused", http_client=server.http, max_retries=0
    )
    tools: Any = [WEATHER]
    first = client.responses.create(model="m", input="Weather in Paris?", tools=tools)
    (call,) = first.output
    assert call.type == "function_call" and call.name == "get_weather"
    output: Any = [{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}]
    with client.responses.stream(
        model="m", input=output, previous_response_id=first.id, reasoning={"summary": "auto"}
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == "Sunny."
    assert final.output[0].type == "reasoning"
    client.responses.delete(final.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(final.id)
