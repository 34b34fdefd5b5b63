"""The remote wire format (engine/server/remote/wire.py): requests out, chunks in."""

from __future__ import annotations

from engine.parsing import ContentDelta, ReasoningText, ToolCallDelta, ToolCallEnd, ToolCallStart
from engine.server.pipeline import GenerateRequest, ToolChoice
from engine.server.remote.wire import ChunkReader, error_text, request_body
from engine.worker.messages import SamplingParams

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def test_a_chat_request_passes_its_fields_through() -> None:
    request = GenerateRequest(
        model="qwen@box",
        dialect="anthropic",
        messages=[
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "hidden",
                "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"a": 1}}}],
            },
            {"role": "tool", "content": "ok", "tool_call_id": "c1"},
        ],
        max_tokens=50,
        stop=("END",),
        sampling=SamplingParams(temperature=0.2, top_k=5),
        tools=[TOOL],
        tool_choice=ToolChoice("auto", "f"),
        parallel_tool_calls=False,
        response_schema={"type": "object"},
        thinking=False,
    )
    body = request_body(request, "Qwen/Qwen3")
    assert body["model"] == "Qwen/Qwen3" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assistant = body["messages"][1]
    assert "reasoning_content" not in assistant
    assert assistant["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'
    assert body["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert body["parallel_tool_calls"] is False
    assert body["response_format"]["json_schema"]["schema"] == {"type": "object"}
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert (body["max_tokens"], body["stop"], body["temperature"], body["top_k"]) == (
        50, ["END"], 0.2, 5
    )  # fmt: skip
    assert "top_p" not in body


def test_a_raw_prompt_goes_to_completions_and_a_count_asks_one_token() -> None:
    body = request_body(
        GenerateRequest(model="m@r", dialect="openai", prompt="def f(", suffix="):"), "m"
    )
    assert body["prompt"] == "def f(" and body["suffix"] == "):" and "messages" not in body
    counting = GenerateRequest(model="m@r", dialect="anthropic", messages=[], count_only=True)
    assert request_body(counting, "m")["max_tokens"] == 1


def _choice(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def test_chunks_become_reasoning_content_and_tool_calls() -> None:
    reader = ChunkReader(completions=False, logprobs=False)
    events = [
        *reader.feed(_choice({"reasoning_content": "think"})),
        *reader.feed(_choice({"reasoning": " more"})),
        *reader.feed(_choice({"content": "Hi"})),
        *reader.feed(_choice({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]})),
        *reader.feed(_choice({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]})),
        *reader.feed(_choice({}, "stop")),
        *reader.feed(
            {
                "choices": [],
                "usage": {
                    "prompt_tokens": 7,
                    "completion_tokens": 3,
                    "prompt_tokens_details": {"cached_tokens": 4},  # the remote's count
                },
            }
        ),
    ]
    assert events == [
        ReasoningText("think"),
        ReasoningText(" more"),
        ContentDelta("Hi"),
        ToolCallStart(0, "c", "f"),
        ToolCallDelta(0, "{}"),
    ]
    ends, done = reader.finish()
    assert isinstance(ends[0], ToolCallEnd) and ends[0].call.arguments == "{}"
    assert done.finish_reason == "tool_calls"  # a stop after calls is a tool-call stop
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (7, 3)
    assert done.usage.cached_tokens == 4  # passed on as the remote said


def test_a_stream_without_usage_counts_its_pieces_and_keeps_length() -> None:
    reader = ChunkReader(completions=True, logprobs=False)
    assert reader.feed({"choices": [{"text": "a", "finish_reason": None}]}) == [ContentDelta("a")]
    reader.feed({"choices": [{"text": "b", "finish_reason": "length"}]})
    _, done = reader.finish()
    assert done.finish_reason == "length" and done.usage.completion_tokens == 2


def test_error_bodies_of_every_shape_give_their_message() -> None:
    assert error_text(b'{"error": {"message": "bad", "param": "x", "code": "c"}}') == (
        "bad", "c", "x"
    )  # fmt: skip
    assert error_text(b'{"error": "gone"}') == ("gone", None, None)
    assert error_text(b'{"detail": "nope"}') == ("nope", None, None)
    assert error_text(b"<html>502</html>") == ("<html>502</html>", None, None)
    assert error_text(b"x" * 2000)[0].endswith("…")


def test_llama_servers_numeric_code_is_dropped_and_its_context_error_keeps_its_meaning() -> None:
    """llama-server's own bodies (tests/fixtures/llama-server: recorded from a real one)."""
    over = (
        b'{"error":{"code":400,"message":"request (4228 tokens) exceeds the available context'
        b' size (2048 tokens)","type":"exceed_context_size_error","n_prompt_tokens":4228}}'
    )
    assert error_text(over)[1:] == ("context_length_exceeded", None)
    unsupported = b'{"error":{"code":501,"message":"no embeddings","type":"not_supported_error"}}'
    assert error_text(unsupported) == ("no embeddings", None, None)
