"""``POST /v1/completions``: raw prompt continuation, streamed or whole.

``suffix`` is fill-in-the-middle through the model's FIM tokens (a model without them is a
400 that names it); ``echo`` repeats the prompt; ``logprobs`` reports each generated token's
log-probability (GenAI gives the chosen token's only, so ``top_logprobs`` holds just it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

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
        if body.suffix is not None and self._serving.engine.status().fim_tokens is None:
            raise APIError(
                400,
                f"The model '{spec.id}' does not support fill-in-the-middle: it has no FIM "
                "tokens. Use a code model that has them (e.g. Qwen2.5-Coder) or drop 'suffix'.",
                param="suffix",
                code="fim_not_supported",
            )
        prompt = body.prompt_text()
        logprobs = body.logprobs is not None
        stream = await self._serving.start(
            prompt=prompt,
            max_tokens=body.max_tokens,
            stop=body.stop_tuple(),
            sampling=sampling_from(body),
            suffix=body.suffix,
            logprobs=logprobs,
        )
        rid, created = protocol.new_id("cmpl"), protocol.now()
        echo = prompt if body.echo else ""
        if body.stream:
            return EventStreamResponse(
                _stream(stream, rid, created, spec.id, echo, body.include_usage, logprobs)
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
            logprobs=protocol.completion_logprobs(collected.logprobs, len(echo))
            if logprobs
            else None,
        )
        answer["timings"] = timings(result)
        return JSONResponse(answer)


async def _stream(
    stream: RequestStream,
    rid: str,
    created: int,
    model: str,
    echo: str,
    include_usage: bool,
    logprobs: bool,
) -> AsyncIterator[str]:
    offset = len(echo)

    def chunk(text: str, finish: str | None = None, tokens: Any = ()) -> str:
        nonlocal offset
        probs = None
        if logprobs:
            probs = protocol.completion_logprobs([(t.token, t.logprob) for t in tokens], offset)
            offset += sum(len(t.token) for t in tokens)
        return sse(
            protocol.text_completion(
                rid, created, model, text, finish, None, chunk=True, logprobs=probs
            )
        )

    if echo:
        yield chunk(echo)
    async for event in stream:
        if not isinstance(event, Finished):
            yield chunk(event.text, tokens=event.logprobs)
            continue
        if event.finish_reason == "error":
            yield sse(error_body(503, event.error or "generation failed", code="engine_error"))
            return
        yield chunk(event.text, event.finish_reason, event.logprobs)
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
