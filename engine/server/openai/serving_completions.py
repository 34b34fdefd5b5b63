"""``POST /v1/completions``: raw prompt continuation, streamed or whole."""

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


class CompletionServing:
    def __init__(self, serving: OpenAIServing) -> None:
        self._serving = serving

    async def create(self, request: Request) -> Response:
        body = await self._serving.parse(request, protocol.CompletionRequest)
        spec = await self._serving.resolve_model(body.model)
        if body.suffix:
            raise APIError(
                400,
                "suffix (fill-in-the-middle) is not supported yet by Sidelight",
                param="suffix",
                code="unsupported_parameter",
            )
        if body.logprobs:
            raise APIError(
                400,
                "logprobs are not supported yet by Sidelight",
                param="logprobs",
                code="unsupported_parameter",
            )
        prompt = body.prompt_text()
        stream = await self._serving.start(
            prompt=prompt,
            max_tokens=body.max_tokens,
            stop=body.stop_tuple(),
            sampling=sampling_from(body),
        )
        rid, created = protocol.new_id("cmpl"), protocol.now()
        echo = prompt if body.echo else ""
        if body.stream:
            return EventStreamResponse(
                _stream(stream, rid, created, spec.id, echo, body.include_usage)
            )
        collected = await unless_disconnected(request, self._serving.collect(stream))
        result = collected.result
        answer = protocol.text_completion(
            rid,
            created,
            spec.id,
            echo + collected.text,
            result.finish_reason,
            protocol.usage(result.prompt_tokens, result.completion_tokens),
        )
        answer["timings"] = timings(result)
        return JSONResponse(answer)


async def _stream(
    stream: RequestStream, rid: str, created: int, model: str, echo: str, include_usage: bool
) -> AsyncIterator[str]:
    def chunk(text: str, finish: str | None = None) -> str:
        return sse(protocol.text_completion(rid, created, model, text, finish, None, chunk=True))

    if echo:
        yield chunk(echo)
    async for event in stream:
        if not isinstance(event, Finished):
            yield chunk(event.text)
            continue
        if event.finish_reason == "error":
            yield sse(error_body(503, event.error or "generation failed", code="engine_error"))
            return
        yield chunk(event.text, event.finish_reason)
        if include_usage:
            final = protocol.text_completion(
                rid,
                created,
                model,
                None,
                None,
                protocol.usage(event.prompt_tokens, event.completion_tokens),
                chunk=True,
            )
            yield sse(final)
    yield sse("[DONE]")
