"""``POST /v1/chat/completions``: streamed (SSE) and whole answers, tools, formats, reasoning.

The reply text from the engine goes through one :class:`engine.parsing.ReplyParser`: a
leading ``<think>`` block becomes ``reasoning_content``, tool-call syntax (chosen from the
model's chat template) becomes ``tool_calls``, the rest is ``content``. ``tool_choice``
``required`` or a named function, and ``response_format``, constrain decoding in the engine
(GenAI structured output), so the JSON is valid against its schema whatever the model.

Runs on the server's event loop; the engine is only reached through async streams.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.client import RequestStream
from engine.parsing import (
    CALL_SYNTAX,
    ContentDelta,
    ReasoningText,
    ReplyEvent,
    ReplyParser,
    ToolCallDelta,
    ToolCallStart,
    call_schema,
    tool_format_for_template,
)
from engine.server.errors import error_body
from engine.server.openai import protocol
from engine.server.openai.serving import OpenAIServing, sampling_from, timings
from engine.server.streaming import EventStreamResponse, sse, unless_disconnected
from engine.worker.messages import Finished, OutputConstraint


@dataclass(frozen=True)
class _Plan:
    """How one request is generated and parsed."""

    tool_format: str | None  # parse tool calls in this syntax (None: tools not in play)
    constraint: OutputConstraint | None
    max_calls: int | None


def plan_request(body: protocol.ChatCompletionRequest, chat_template: str | None) -> _Plan:
    """Choose the tool syntax and any decoding constraint for ``body``."""
    fmt = tool_format_for_template(chat_template) if body.calls_tools else None
    max_calls = 1 if body.parallel_tool_calls is False else None
    choice = body.tool_choice
    if fmt is not None and (choice == "required" or isinstance(choice, protocol.NamedToolChoice)):
        name = choice.function.name if isinstance(choice, protocol.NamedToolChoice) else None
        syntax = CALL_SYNTAX[fmt]
        schema = call_schema(fmt, body.tool_dicts(), name)
        constraint = OutputConstraint(json.dumps(schema), syntax.begin, syntax.end, "tools")
        return _Plan(fmt, constraint, 1 if name else max_calls)
    response_format = body.response_format
    if response_format is None or response_format.type == "text":
        return _Plan(fmt, None, max_calls)
    if response_format.type == "json_object":
        schema_text = json.dumps({"type": "object"})
    else:
        assert response_format.json_schema is not None
        schema_text = json.dumps(response_format.json_schema.json_schema)
    return _Plan(fmt, OutputConstraint(schema_text, param="response_format"), max_calls)


class ChatServing:
    def __init__(self, serving: OpenAIServing) -> None:
        self._serving = serving

    async def create(self, request: Request) -> Response:
        body = await self._serving.parse(request, protocol.ChatCompletionRequest)
        spec = await self._serving.resolve_model(body.model)
        plan = plan_request(body, self._serving.engine.status().chat_template)
        stream = await self._serving.start(
            messages=body.template_messages(),
            max_tokens=body.max_tokens,
            stop=body.stop_tuple(),
            sampling=sampling_from(body),
            chat_template_kwargs=body.template_kwargs(),
            tools=body.tool_dicts() if plan.tool_format else None,
            constraint=plan.constraint,
            logprobs=body.logprobs,
        )
        parser = ReplyParser(
            tool_format=plan.tool_format,
            starts_in_reasoning=bool(stream.accepted and stream.accepted.opens_reasoning),
            max_calls=plan.max_calls,
        )
        rid, created = protocol.new_id("chatcmpl"), protocol.now()
        if body.stream:
            events = _stream(stream, parser, rid, created, spec.id, body)
            return EventStreamResponse(events)
        collected = await unless_disconnected(request, self._serving.collect(stream))
        parser.feed(collected.text)
        parser.finish()
        result = collected.result
        calls = [call.to_openai() for call in parser.calls]
        content = parser.content if parser.content or not calls else None
        answer = protocol.chat_completion(
            rid,
            created,
            spec.id,
            protocol.chat_message(content, calls, parser.reasoning),
            _finish_reason(result.finish_reason, bool(calls)),
            protocol.usage(result.prompt_tokens, result.completion_tokens),
            protocol.chat_logprobs(collected.logprobs) if body.logprobs else None,
        )
        answer["timings"] = timings(result)
        return JSONResponse(answer)


def _finish_reason(engine_reason: str, called: bool) -> str:
    return "tool_calls" if called and engine_reason == "stop" else engine_reason


def _delta(event: ReplyEvent) -> dict[str, Any] | None:
    """The OpenAI ``delta`` for one parsed event (``None``: nothing to send)."""
    if isinstance(event, ReasoningText):
        return {"reasoning_content": event.text}
    if isinstance(event, ContentDelta):
        return {"content": event.text}
    if isinstance(event, ToolCallStart):
        function = {"name": event.name, "arguments": ""}
        call = {"index": event.index, "id": event.id, "type": "function", "function": function}
        return {"tool_calls": [call]}
    if isinstance(event, ToolCallDelta):
        return {"tool_calls": [{"index": event.index, "function": {"arguments": event.arguments}}]}
    return None  # ToolCallEnd: the deltas already carried everything


async def _stream(
    stream: RequestStream,
    parser: ReplyParser,
    rid: str,
    created: int,
    model: str,
    body: protocol.ChatCompletionRequest,
) -> AsyncIterator[str]:
    """OpenAI's chunk sequence: role, deltas, one finish, optional usage, [DONE]."""
    include_usage = body.include_usage

    def chunk(
        delta: dict[str, Any] | None,
        finish: str | None = None,
        usage: dict[str, int] | None = None,
        logprobs: dict[str, Any] | None = None,
    ) -> str:
        data = protocol.chat_chunk(rid, created, model, delta, finish, usage, include_usage)
        if logprobs is not None and data["choices"]:
            data["choices"][0]["logprobs"] = logprobs
        return sse(data)

    yield chunk({"role": "assistant"})  # the first chunk carries the role only
    async for event in stream:
        final = isinstance(event, Finished)
        if isinstance(event, Finished) and event.finish_reason == "error":
            yield sse(error_body(503, event.error or "generation failed", code="engine_error"))
            return
        parsed = parser.feed(event.text) + (parser.finish() if final else [])
        logprobs = (
            protocol.chat_logprobs([(t.token, t.logprob) for t in event.logprobs])
            if body.logprobs and event.logprobs
            else None
        )
        for delta in filter(None, map(_delta, parsed)):
            yield chunk(delta, logprobs=logprobs)
            logprobs = None
        if logprobs is not None:
            yield chunk({}, logprobs=logprobs)
        if not isinstance(event, Finished):
            continue
        yield chunk({}, _finish_reason(event.finish_reason, bool(parser.calls)))
        if include_usage:
            final_chunk = protocol.chat_chunk(
                rid,
                created,
                model,
                None,
                None,
                protocol.usage(event.prompt_tokens, event.completion_tokens),
                True,
            )
            final_chunk["timings"] = timings(event)
            yield sse(final_chunk)
    yield sse("[DONE]")
