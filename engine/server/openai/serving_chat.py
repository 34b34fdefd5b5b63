"""``POST /v1/chat/completions``: a translator into the pipeline and a renderer of its events.

The request becomes one :class:`GenerateRequest`; the pipeline parses the reply (a leading
``<think>`` block is ``reasoning_content``, tool-call syntax is ``tool_calls``, the rest is
``content``) and this module renders it as OpenAI's chunks (SSE) or one JSON body.

Runs on the server's event loop; the engine is only reached through the pipeline.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.parsing import ContentDelta, ReasoningText, ToolCallDelta, ToolCallStart
from engine.server.errors import APIError
from engine.server.images import ImageList
from engine.server.openai import protocol
from engine.server.pipeline import (
    Done,
    FinishReason,
    GenerateRequest,
    Generation,
    Logprobs,
    Pipeline,
    PipelineEvent,
    Reply,
    ToolChoice,
    ToolMode,
)
from engine.server.request_body import parse_body
from engine.server.streaming import EventStreamResponse, sse, unless_disconnected


class ChatServing:
    def __init__(self, pipeline: Pipeline) -> None:
        self._pipeline = pipeline

    async def create(self, request: Request) -> Response:
        body = await parse_body(request, protocol.ChatCompletionRequest)
        generate = generate_request(body)
        rid, created = protocol.new_id("chatcmpl"), protocol.now()
        if body.stream:
            generation = await self._pipeline.start(generate)
            return EventStreamResponse(_stream(generation, rid, created, body))
        reply = await unless_disconnected(request, self._pipeline.collect(generate))
        return JSONResponse(_answer(reply, rid, created, body.logprobs))


# ---- translator --------------------------------------------------------------------------


def generate_request(body: protocol.ChatCompletionRequest) -> GenerateRequest:
    """The pipeline's request for a validated chat completion."""
    images = ImageList()
    messages = body.template_messages(images)
    return GenerateRequest(
        model=body.model,
        dialect="openai",
        messages=messages,
        images=images.all(),
        max_tokens=body.max_tokens,
        stop=body.stop_tuple(),
        sampling=body.sampling(),
        tools=body.tool_dicts(),
        tool_choice=_tool_choice(body.tool_choice),
        parallel_tool_calls=body.parallel_tool_calls is not False,
        response_schema=body.response_schema,
        thinking=body.thinking,
        chat_template_kwargs=body.template_kwargs(),
        logprobs=body.logprobs,
        split_reasoning=True,  # any model's leading <think> block is reasoning_content
        keep_alive=None if body.ttl is None else float(body.ttl),
    )


def _tool_choice(choice: ToolMode | protocol.NamedToolChoice | None) -> ToolChoice:
    if choice is None:
        return ToolChoice()
    if isinstance(choice, protocol.NamedToolChoice):
        return ToolChoice("required", choice.function.name)
    return ToolChoice(choice)


# ---- renderer ----------------------------------------------------------------------------


def _answer(reply: Reply, rid: str, created: int, logprobs: bool) -> dict[str, Any]:
    calls = [call.to_openai() for call in reply.calls]
    content = reply.content if reply.content or not calls else None
    done = reply.done
    answer = protocol.chat_completion(
        rid,
        created,
        reply.started.model,
        protocol.chat_message(content, calls, reply.reasoning),
        done.finish_reason,
        protocol.usage(
            done.usage.prompt_tokens, done.usage.completion_tokens, done.usage.cached_tokens
        ),
        protocol.chat_logprobs(reply.logprobs) if logprobs else None,
    )
    answer["timings"] = protocol.timings(done)
    return answer


def _delta(event: PipelineEvent) -> dict[str, Any] | None:
    """The OpenAI ``delta`` for one reply event (``None``: nothing to send)."""
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
    generation: Generation, rid: str, created: int, body: protocol.ChatCompletionRequest
) -> AsyncIterator[str]:
    """OpenAI's chunk sequence: role, deltas, one finish, optional usage, [DONE].

    A step's log-probabilities ride on its first delta, or on an empty delta of their own.
    """
    model, include_usage = generation.started.model, body.include_usage

    def chunk(
        delta: dict[str, Any] | None,
        finish: FinishReason | None = None,
        usage: dict[str, int] | None = None,
        logprobs: dict[str, Any] | None = None,
    ) -> str:
        data = protocol.chat_chunk(rid, created, model, delta, finish, usage, include_usage)
        if logprobs is not None and data["choices"]:
            data["choices"][0]["logprobs"] = logprobs
        return sse(data)

    yield chunk({"role": "assistant"})  # the first chunk carries the role only
    pending: dict[str, Any] | None = None  # log-probabilities waiting for a delta
    try:
        async for event in generation:
            if isinstance(event, Logprobs | Done) and pending is not None:
                yield chunk({}, logprobs=pending)
                pending = None
            if isinstance(event, Logprobs):
                pending = protocol.chat_logprobs(list(event.items)) if event.items else None
            elif isinstance(event, Done):
                yield chunk({}, event.finish_reason)
                if include_usage:
                    yield _usage_chunk(event, rid, created, model)
            elif (delta := _delta(event)) is not None:
                yield chunk(delta, logprobs=pending)
                pending = None
    except APIError as exc:
        yield sse(exc.body())
        return
    yield sse("[DONE]")


def _usage_chunk(done: Done, rid: str, created: int, model: str) -> str:
    usage = protocol.usage(
        done.usage.prompt_tokens, done.usage.completion_tokens, done.usage.cached_tokens
    )
    final = protocol.chat_chunk(rid, created, model, None, None, usage, True)
    final["timings"] = protocol.timings(done)
    return sse(final)
