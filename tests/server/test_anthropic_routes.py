"""``/v1/messages`` over HTTP against a scripted pipeline: event streams, messages, errors.

:class:`~tests.server.scripted_pipeline.ScriptedPipeline` (standing in for the pipeline only in
these unit tests) plays fixed reply events, so every event sequence Anthropic's
clients read (text, thinking, tool use, each stop reason, a failure mid-stream) is checked
exactly, on the wire and through the official ``anthropic`` SDK's stream accumulator. Real
inference behind the same routes is in ``test_anthropic_e2e.py``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import httpx2
import pytest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware

from engine.parsing import (
    ContentDelta,
    ReasoningText,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from engine.server.anthropic import render
from engine.server.anthropic.routes import ANTHROPIC_ERRORS, anthropic_routes
from engine.server.auth import ApiKeyMiddleware
from engine.server.body_limit import BodyLimitMiddleware
from engine.server.errors import (
    APIError,
    ErrorShapes,
    handle_api_error,
    handle_http_exception,
    handle_unexpected,
)
from engine.server.pipeline import (
    Done,
    FinishReason,
    GenerateRequest,
    PipelineEvent,
    Timings,
    Usage,
)
from tests.server.scripted_pipeline import Script, ScriptedPipeline

MODEL = "demo"
PROMPT_TOKENS = 12
HELLO = {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": "Hello"}]}


def done(reason: FinishReason = "stop", completion: int = 5, stop: str | None = None) -> Done:
    return Done(reason, Usage(PROMPT_TOKENS, completion), Timings(0.01, 0.05), stop)


def call_events(index: int, name: str, arguments: list[str]) -> list[PipelineEvent]:
    call_id = f"call_{index}abc"
    call = ToolCall(call_id, name, "".join(arguments))
    return [
        ToolCallStart(index, call_id, name),
        *(ToolCallDelta(index, piece) for piece in arguments),
        ToolCallEnd(index, call),
    ]


def build_app(pipeline: ScriptedPipeline, api_key: str | None = None) -> Starlette:
    middleware = [Middleware(BodyLimitMiddleware, max_bytes=64 * 1024)]
    if api_key:
        middleware.append(Middleware(ApiKeyMiddleware, api_key=api_key))
    app = Starlette(
        routes=anthropic_routes(pipeline),
        middleware=middleware,
        exception_handlers={
            APIError: handle_api_error,
            HTTPException: handle_http_exception,
            Exception: handle_unexpected,
        },
    )
    app.state.error_shapes = ErrorShapes([ANTHROPIC_ERRORS])
    return app


@pytest.fixture
def pipeline() -> ScriptedPipeline:
    return ScriptedPipeline(
        Script([ContentDelta("Hi"), done()]), model=MODEL, prompt_tokens=PROMPT_TOKENS
    )


@pytest.fixture
async def http(pipeline: ScriptedPipeline) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=build_app(pipeline))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


@pytest.fixture
async def sdk(pipeline: ScriptedPipeline) -> AsyncIterator[anthropic.AsyncAnthropic]:
    # The SDK runs on httpx2 (httpx's successor), which has the same ASGI transport.
    transport = httpx2.ASGITransport(app=build_app(pipeline))
    async with httpx2.AsyncClient(transport=transport, base_url="http://test") as client:
        yield anthropic.AsyncAnthropic(
            base_url="http://test", api_key="unused", http_client=client, max_retries=0
        )


def parse_sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    """``(event name, data)`` pairs; every event must name itself in its data too."""
    events = []
    for chunk in text.strip().split("\n\n"):
        lines = chunk.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), chunk
        name, data = lines[0][len("event: ") :], json.loads(lines[1][len("data: ") :])
        assert data["type"] == name
        events.append((name, data))
    return events


async def stream(http: httpx.AsyncClient, **extra: Any) -> list[tuple[str, dict[str, Any]]]:
    response = await http.post("/v1/messages?beta=true", json={**HELLO, "stream": True, **extra})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return parse_sse(response.text)


def without_pings(events: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    return [(name, data) for name, data in events if name != "ping"]


# ---- streams -----------------------------------------------------------------------------


async def test_text_stream_is_anthropics_exact_sequence(
    http: httpx.AsyncClient, pipeline: ScriptedPipeline
) -> None:
    pipeline.scripts = [Script([ContentDelta("Hel"), ContentDelta("lo!"), done(completion=3)])]
    events = await stream(http)
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0][1]["message"]
    assert start["id"].startswith("msg_") and start["model"] == MODEL
    assert start["role"] == "assistant" and start["content"] == []
    assert start["stop_reason"] is None and start["usage"]["input_tokens"] == PROMPT_TOKENS
    assert events[2][1] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    assert [e[1]["delta"] for e in events[3:5]] == [
        {"type": "text_delta", "text": "Hel"},
        {"type": "text_delta", "text": "lo!"},
    ]
    assert events[5][1] == {"type": "content_block_stop", "index": 0}
    assert events[6][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        # Anthropic's cumulative usage: the cache fields too (nothing cached here).
        "usage": {
            "input_tokens": PROMPT_TOKENS,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 3,
        },
    }
    assert pipeline.generations[0].cancelled  # leaving the stream releases the generation


async def test_thinking_then_text_are_two_blocks(
    http: httpx.AsyncClient, pipeline: ScriptedPipeline
) -> None:
    pipeline.scripts = [
        Script(
            [
                ReasoningText("2 plus 2 "),
                ReasoningText("is 4."),
                ContentDelta("\n\n"),
                ContentDelta("The answer is 4."),
                done(),
            ]
        )
    ]
    events = without_pings(await stream(http, thinking={"type": "enabled", "budget_tokens": 1024}))
    blocks = [(d["index"], d["content_block"]) for n, d in events if n == "content_block_start"]
    assert blocks == [
        (0, {"type": "thinking", "thinking": "", "signature": ""}),
        (1, {"type": "text", "text": ""}),
    ]
    deltas = [(d["index"], d["delta"]) for n, d in events if n == "content_block_delta"]
    assert deltas == [
        (0, {"type": "thinking_delta", "thinking": "2 plus 2 "}),
        (0, {"type": "thinking_delta", "thinking": "is 4."}),
        (1, {"type": "text_delta", "text": "\n\nThe answer is 4."}),  # held whitespace goes first
    ]
    stops = [d["index"] for n, d in events if n == "content_block_stop"]
    assert stops == [0, 1]
    assert pipeline.requests[0].thinking is True


async def test_omitted_thinking_keeps_the_block_without_its_text(
    http: httpx.AsyncClient, pipeline: ScriptedPipeline
) -> None:
    pipeline.scripts = [Script([ReasoningText("secret"), ContentDelta("Answer."), done()])]
    events = without_pings(await stream(http, thinking={"type": "adaptive", "display": "omitted"}))
    assert [(n, d.get("delta", d.get("content_block"))) for n, d in events[1:6]] == [
        ("content_block_start", {"type": "thinking", "thinking": "", "signature": ""}),
        ("content_block_stop", None),
        ("content_block_start", {"type": "text", "text": ""}),
        ("content_block_delta", {"type": "text_delta", "text": "Answer."}),
        ("content_block_stop", None),
    ]


async def test_tool_use_streams_its_input_as_json_deltas(
    http: httpx.AsyncClient, pipeline: ScriptedPipeline
) -> None:
    pipeline.scripts = [
        Script(
            [
                ContentDelta("\n"),  # whitespace before a call opens no text block
                *call_events(0, "get_weather", ['{"city": ', '"Paris"}']),
                *call_events(1, "get_time", ["{}"]),
                done("tool_calls", completion=20),
            ]
        )
    ]
    events = without_pings(await stream(http))
    assert [n for n, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[1][1]["content_block"] == {
        "type": "tool_use",
        "id": "toolu_0abc",
        "name": "get_weather",
        "input": {},
    }
    assert [d["delta"] for _, d in events[2:4]] == [
        {"type": "input_json_delta", "partial_json": '{"city": '},
        {"type": "input_json_delta", "partial_json": '"Paris"}'},
    ]
    assert events[5][1]["index"] == 1 and events[5][1]["content_block"]["name"] == "get_time"
    assert events[8][1]["delta"]["stop_reason"] == "tool_use"


@pytest.mark.parametrize(
    ("final", "max_tokens", "reason", "sequence"),
    [
        (done("stop"), 64, "end_turn", None),
        (done("stop", stop="END"), 64, "stop_sequence", "END"),
        (done("length", completion=64), 64, "max_tokens", None),
        # the context filled up before max_tokens did
        (done("length", completion=40), 64, "model_context_window_exceeded", None),
        (done("tool_calls"), 64, "tool_use", None),
    ],
)
async def test_stop_reasons(
    http: httpx.AsyncClient,
    pipeline: ScriptedPipeline,
    final: Done,
    max_tokens: int,
    reason: str,
    sequence: str | None,
) -> None:
    pipeline.scripts = [Script([ContentDelta("x"), final])]
    events = await stream(http, max_tokens=max_tokens)
    delta = next(d for n, d in events if n == "message_delta")
    assert delta["delta"] == {"stop_reason": reason, "stop_sequence": sequence}
    whole = await http.post("/v1/messages", json={**HELLO, "max_tokens": max_tokens})
    assert (whole.json()["stop_reason"], whole.json()["stop_sequence"]) == (reason, sequence)


async def test_a_failure_mid_stream_is_an_error_event(
    http: httpx.AsyncClient, pipeline: ScriptedPipeline
) -> None:
    failure = APIError(503, "the engine restarted", code="engine_error")
    pipeline.scripts = [Script([ContentDelta("Hel")], failure=failure)]
    events = await stream(http)
    assert [n for n, _ in events][-2:] == ["content_block_delta", "error"]
    assert events[-1][1] == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "the engine restarted"},
    }
    assert pipeline.generations[0].cancelled


async def test_pings_keep_a_slow_stream_alive(pipeline: ScriptedPipeline) -> None:
    pipeline.scripts = [Script([ContentDelta("slow"), done()], delay=0.25)]
    generation = await pipeline.start(GenerateRequest(model=MODEL, dialect="anthropic"))
    chunks = [c async for c in render.stream_events(generation, "msg_1", 10, ping_seconds=0.05)]
    names = [name for name, _ in parse_sse("".join(chunks))]
    assert names.index("content_block_start") > 2  # pings went out while waiting
    assert names.count("ping") >= 3
    assert names[-2:] == ["message_delta", "message_stop"]


# ---- whole messages ----------------------------------------------------------------------


async def test_whole_message(http: httpx.AsyncClient, pipeline: ScriptedPipeline) -> None:
    pipeline.scripts = [
        Script(
            [
                ReasoningText("Think."),
                ContentDelta("Calling."),
                *call_events(0, "get_weather", ['{"city": "Paris"}']),
                done("tool_calls", completion=9),
            ]
        )
    ]
    response = await http.post("/v1/messages", json=HELLO)
    assert response.status_code == 200
    body = response.json()
    assert body["id"].startswith("msg_")
    assert {k: v for k, v in body.items() if k != "id"} == {
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [
            {"type": "thinking", "thinking": "Think.", "signature": ""},
            {"type": "text", "text": "Calling."},
            {
                "type": "tool_use",
                "id": "toolu_0abc",
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": PROMPT_TOKENS,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 9,
        },
    }


async def test_sdk_reads_the_stream_and_the_message(
    sdk: anthropic.AsyncAnthropic, pipeline: ScriptedPipeline
) -> None:
    """The official SDK's accumulator builds the same message from the stream."""
    pipeline.scripts = [
        Script(
            [
                ReasoningText("Hmm."),
                ContentDelta("Weather:"),
                *call_events(0, "get_weather", ['{"ci', 'ty": "Paris"}']),
                done("tool_calls", completion=7),
            ]
        )
    ]
    request: dict[str, Any] = {**HELLO, "thinking": {"type": "enabled", "budget_tokens": 1024}}
    async with sdk.messages.stream(**request) as events:
        texts = [e.text async for e in events if e.type == "text"]
        streamed = await events.get_final_message()
    whole = await sdk.messages.create(**request)
    assert texts == ["Weather:"]
    for message in (streamed, whole):
        assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
        thinking, text, tool = message.content
        assert isinstance(thinking, anthropic.types.ThinkingBlock) and thinking.thinking == "Hmm."
        assert isinstance(text, anthropic.types.TextBlock) and text.text == "Weather:"
        assert isinstance(tool, anthropic.types.ToolUseBlock)
        assert (tool.name, tool.input) == ("get_weather", {"city": "Paris"})
        assert message.stop_reason == "tool_use"
        assert (message.usage.input_tokens, message.usage.output_tokens) == (PROMPT_TOKENS, 7)


# ---- count_tokens ------------------------------------------------------------------------


async def test_count_tokens_asks_for_the_prompt_only(
    sdk: anthropic.AsyncAnthropic, pipeline: ScriptedPipeline
) -> None:
    counted = await sdk.messages.count_tokens(
        model=MODEL,
        system="Be brief.",
        messages=[{"role": "user", "content": "Hello"}],
        thinking={"type": "disabled"},
    )
    assert counted.input_tokens == PROMPT_TOKENS
    (request,) = pipeline.requests
    assert request.count_only and request.thinking is False
    assert request.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello"},
    ]
    assert request.max_tokens == 1  # were count_only ignored, it would cost one token


# ---- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "kind", "message"),
    [
        ({**HELLO, "max_tokens": None}, 400, "invalid_request_error", "max_tokens: "),
        (
            {"model": MODEL, "messages": HELLO["messages"]},
            400,
            "invalid_request_error",
            "max_tokens: Field required",
        ),
        (
            {**HELLO, "messages": [{"role": "user", "content": [{"type": "text"}]}]},
            400,
            "invalid_request_error",
            "messages.0.content.0.text: Field required",
        ),
        (
            {
                **HELLO,
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "tool_use", "id": "t", "name": "n", "input": 3}],
                    }
                ],
            },
            400,
            "invalid_request_error",
            "messages.0.content.0.input: ",
        ),
        (
            {
                **HELLO,
                "tool_choice": {"type": "tool", "name": "nope"},
                "tools": [{"name": "get_time", "input_schema": {"type": "object"}}],
            },
            400,
            "invalid_request_error",
            "tool_choice: no tool named 'nope' in tools",
        ),
        (
            {**HELLO, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
            400,
            "invalid_request_error",
            "messages.0.content.0.source: an image needs source.type 'base64'",
        ),
    ],
)
async def test_bad_requests_answer_in_anthropics_shape(
    http: httpx.AsyncClient,
    pipeline: ScriptedPipeline,
    body: dict[str, Any],
    status: int,
    kind: str,
    message: str,
) -> None:
    response = await http.post("/v1/messages", json=body)
    assert response.status_code == status
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == kind
    assert error["error"]["message"].startswith(message), error
    assert pipeline.requests == []  # refused before the engine saw anything


@pytest.mark.parametrize(
    ("refusal", "kind"),
    [
        (
            APIError(404, "The model 'nope' does not exist", code="model_not_found"),
            "not_found_error",
        ),
        (
            APIError(
                400,
                "the prompt has 3000 tokens; the context is 2048",
                code="context_length_exceeded",
            ),
            "invalid_request_error",
        ),
        (APIError(503, "demo is still loading", headers={"Retry-After": "5"}), "overloaded_error"),
        (APIError(500, "could not load demo"), "api_error"),
    ],
)
@pytest.mark.parametrize("streamed", [False, True])
async def test_pipeline_refusals_keep_their_status(
    http: httpx.AsyncClient,
    pipeline: ScriptedPipeline,
    refusal: APIError,
    kind: str,
    streamed: bool,
) -> None:
    pipeline.scripts = [Script(refusal=refusal)]
    response = await http.post("/v1/messages", json={**HELLO, "stream": streamed})
    assert response.status_code == refusal.status
    assert response.json() == {"type": "error", "error": {"type": kind, "message": refusal.message}}
    for name, value in refusal.headers.items():
        assert response.headers[name] == value


async def test_bad_json_and_wrong_method(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/v1/messages", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    wrong = await http.get("/v1/messages")
    assert wrong.status_code == 405
    assert wrong.json() == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "method GET is not allowed on /v1/messages",
        },
    }


async def test_api_key_as_x_api_key_or_bearer(pipeline: ScriptedPipeline) -> None:
    transport = httpx.ASGITransport(app=build_app(pipeline, api_key="sekret"))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        missing = await http.post("/v1/messages", json=HELLO)
        assert missing.status_code == 401
        assert missing.json()["type"] == "error"
        assert missing.json()["error"]["type"] == "authentication_error"
        assert "x-api-key" in missing.json()["error"]["message"]
        for headers in ({"x-api-key": "sekret"}, {"Authorization": "Bearer sekret"}):
            headers["anthropic-version"] = "2023-06-01"
            ok = await http.post("/v1/messages", json=HELLO, headers=headers)
            assert ok.status_code == 200, ok.text
        too_big = await http.post(
            "/v1/messages", content=b"x" * (65 * 1024), headers={"x-api-key": "sekret"}
        )
        assert too_big.status_code == 413
        assert too_big.json()["error"]["type"] == "request_too_large"
