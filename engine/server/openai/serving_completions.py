"""``POST /v1/completions``: raw prompt continuation, streamed or whole.

``suffix`` is fill-in-the-middle through the model's FIM tokens (a model without them is a
400 that names it); ``echo`` repeats the prompt; ``logprobs`` reports each generated token's
log-probability (GenAI gives the chosen token's only, so ``top_logprobs`` holds just it).
The text is never parsed: what the model wrote is what the client gets.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.parsing import ContentDelta
from engine.server.errors import APIError
from engine.server.openai import protocol
from engine.server.pipeline import (
    Done,
    FinishReason,
    GenerateRequest,
    Generation,
    Logprobs,
    Pipeline,
)
from engine.server.request_body import parse_body
from engine.server.streaming import EventStreamResponse, sse, unless_disconnected


class CompletionServing:
    def __init__(self, pipeline: Pipeline) -> None:
        self._pipeline = pipeline

    async def create(self, request: Request) -> Response:
        body = await parse_body(request, protocol.CompletionRequest)
        generate = generate_request(body)
        rid, created = protocol.new_id("cmpl"), protocol.now()
        echo = body.prompt_text() if body.echo else ""
        if body.stream:
            generation = await self._pipeline.start(generate)
            return EventStreamResponse(_stream(generation, rid, created, echo, body))
        reply = await unless_disconnected(request, self._pipeline.collect(generate))
        done = reply.done
        answer = protocol.text_completion(
            rid,
            created,
            reply.started.model,
            echo + reply.content,
            done.finish_reason,
            protocol.usage(
                done.usage.prompt_tokens, done.usage.completion_tokens, done.usage.cached_tokens
            ),
            logprobs=protocol.completion_logprobs(reply.logprobs, len(echo))
            if generate.logprobs
            else None,
        )
        answer["timings"] = protocol.timings(done)
        return JSONResponse(answer)


def generate_request(body: protocol.CompletionRequest) -> GenerateRequest:
    """The pipeline's request for a validated completion: the prompt as written."""
    return GenerateRequest(
        model=body.model,
        dialect="openai",
        prompt=body.prompt_text(),
        suffix=body.suffix,
        max_tokens=body.max_tokens,
        stop=body.stop_tuple(),
        sampling=body.sampling(),
        logprobs=body.logprobs is not None,
        split_reasoning=False,
        keep_alive=None if body.ttl is None else float(body.ttl),
    )


async def _stream(
    generation: Generation,
    rid: str,
    created: int,
    echo: str,
    body: protocol.CompletionRequest,
) -> AsyncIterator[str]:
    """One chunk per engine step (with its log-probabilities), the finish, [DONE]."""
    model, logprobs = generation.started.model, body.logprobs is not None
    offset = len(echo)
    tokens: tuple[tuple[str, float], ...] = ()  # the step's log-probabilities

    def chunk(text: str | None, finish: FinishReason | None = None) -> str:
        nonlocal offset, tokens
        probs = None
        if logprobs:
            probs = protocol.completion_logprobs(list(tokens), offset)
            offset += sum(len(token) for token, _ in tokens)
            tokens = ()
        return sse(
            protocol.text_completion(
                rid, created, model, text, finish, None, chunk=True, logprobs=probs
            )
        )

    if echo:
        yield chunk(echo)
    try:
        async for event in generation:
            if isinstance(event, Logprobs):
                tokens = event.items
            elif isinstance(event, ContentDelta):
                yield chunk(event.text)
            elif isinstance(event, Done):
                yield chunk("", event.finish_reason)
                if body.include_usage:
                    usage = protocol.usage(
                        event.usage.prompt_tokens,
                        event.usage.completion_tokens,
                        event.usage.cached_tokens,
                    )
                    final = protocol.text_completion(
                        rid, created, model, None, None, usage, chunk=True
                    )
                    yield sse(final)
    except APIError as exc:
        yield sse(exc.body())
        return
    yield sse("[DONE]")
