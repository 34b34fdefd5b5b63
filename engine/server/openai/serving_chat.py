"""``POST /v1/chat/completions``: streamed (SSE) and whole answers."""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.client import RequestStream
from engine.server.errors import APIError, error_body
from engine.server.openai import protocol
from engine.server.openai.serving import OpenAIServing, sampling_from, timings
from engine.server.streaming import EventStreamResponse, sse, unless_disconnected
from engine.worker.messages import Finished


class ChatServing:
    def __init__(self, serving: OpenAIServing) -> None:
        self._serving = serving

    async def create(self, request: Request) -> Response:
        body = await self._serving.parse(request, protocol.ChatCompletionRequest)
        spec = await self._serving.resolve_model(body.model)
        for field in ("tools", "response_format"):
            if getattr(body, field):
                raise APIError(
                    400,
                    f"{field} is not supported yet by Sidelight",
                    param=field,
                    code="unsupported_parameter",
                )
        stream = await self._serving.start(
            messages=body.template_messages(),
            max_tokens=body.max_tokens,
            stop=body.stop_tuple(),
            sampling=sampling_from(body),
            chat_template_kwargs=body.chat_template_kwargs,
        )
        rid, created = protocol.new_id("chatcmpl"), protocol.now()
        if body.stream:
            events = _stream(stream, rid, created, spec.id, body.include_usage)
            return EventStreamResponse(events)
        collected = await unless_disconnected(request, self._serving.collect(stream))
        result = collected.result
        answer = protocol.chat_completion(
            rid,
            created,
            spec.id,
            collected.text,
            result.finish_reason,
            protocol.usage(result.prompt_tokens, result.completion_tokens),
        )
        answer["timings"] = timings(result)
        return JSONResponse(answer)


async def _stream(
    stream: RequestStream, rid: str, created: int, model: str, include_usage: bool
) -> AsyncIterator[str]:
    """OpenAI's chunk sequence: role, content pieces, one finish, optional usage, [DONE]."""

    def chunk(
        delta: dict[str, str] | None, finish: str | None = None, usage: dict[str, int] | None = None
    ) -> str:
        return sse(protocol.chat_chunk(rid, created, model, delta, finish, usage, include_usage))

    yield chunk({"role": "assistant"})
    async for event in stream:
        if not isinstance(event, Finished):
            yield chunk({"content": event.text})
            continue
        if event.finish_reason == "error":
            yield sse(error_body(503, event.error or "generation failed", code="engine_error"))
            return
        if event.text:
            yield chunk({"content": event.text})
        yield chunk({}, event.finish_reason)
        if include_usage:
            final = protocol.chat_chunk(
                rid,
                created,
                model,
                None,
                None,
                protocol.usage(event.prompt_tokens, event.completion_tokens),
                True,
            )
            final["timings"] = timings(event)
            yield sse(final)
    yield sse("[DONE]")
