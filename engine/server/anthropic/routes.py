"""Routes of Anthropic's Messages API: parse, translate, run the pipeline, render.

``POST /v1/messages`` (Claude Code adds ``?beta=true``; query strings are ignored) and
``POST /v1/messages/count_tokens``. The API key is checked by the app's middleware, sent
as ``x-api-key`` or ``Authorization: Bearer``; ``anthropic-version`` and
``anthropic-beta`` are accepted whatever their value. Every error, including one raised
by the pipeline (an unknown model is a 404, a prompt over the context a 400), is answered
in Anthropic's shape ``{"type": "error", "error": {"type", "message"}}``; so is anything
refused before these routes run (the middleware, a wrong method, an unexpected failure):
:data:`ANTHROPIC_ERRORS` is the app's error shape for these paths.

Runs on the server's event loop; the engine is reached only through the pipeline.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from engine.server.anthropic import protocol, render, translate
from engine.server.errors import APIError, ErrorShape
from engine.server.json_body import read_json_object
from engine.server.pipeline import GenerateRequest, Reply
from engine.server.streaming import ClientGone, EventStreamResponse, unless_disconnected

logger = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Response]]
R = TypeVar("R", bound=protocol.CountTokensRequest)
_INLINE_PARSE_BYTES = 256 * 1024


class PipelineLike(Protocol):
    """What these routes ask of :class:`engine.server.pipeline.run.Pipeline`."""

    async def start(self, request: GenerateRequest) -> render.GenerationLike: ...

    async def collect(self, request: GenerateRequest) -> Reply: ...

    async def count(self, request: GenerateRequest) -> int: ...


def _error_body(
    status: int, message: str, *, param: str | None, code: str | None
) -> dict[str, Any]:
    """Anthropic's body names neither the field nor a code; its ``type`` follows the status."""
    return protocol.error_body(status, message)


ANTHROPIC_ERRORS = ErrorShape(("/v1/messages", "/v1/messages/*"), _error_body)


def anthropic_routes(pipeline: PipelineLike) -> list[Route]:
    """The Messages API routes, generating through ``pipeline``."""

    async def messages(request: Request) -> Response:
        body = await parse(request, protocol.MessagesRequest)
        generate = translate.generate_request(body)
        mid = protocol.new_message_id()
        omit = body.thinking is not None and body.thinking.display == "omitted"
        if body.stream:
            generation = await pipeline.start(generate)
            events = render.stream_events(generation, mid, body.max_tokens, omit_thinking=omit)
            return EventStreamResponse(events)
        reply = await unless_disconnected(request, pipeline.collect(generate))
        return JSONResponse(render.whole_message(reply, mid, body.max_tokens, omit_thinking=omit))

    async def count_tokens(request: Request) -> Response:
        body = await parse(request, protocol.CountTokensRequest)
        # The pipeline's count path: read to its end, so the log shows it finished (200),
        # not cancelled.
        tokens = await unless_disconnected(
            request, pipeline.count(translate.generate_request(body))
        )
        return JSONResponse({"input_tokens": tokens})

    return [
        Route("/v1/messages", _anthropic_errors(messages), methods=["POST"]),
        Route("/v1/messages/count_tokens", _anthropic_errors(count_tokens), methods=["POST"]),
    ]


async def parse(request: Request, model: type[R]) -> R:
    """Read and validate the JSON body; a bad field is a 400 naming it."""
    raw = await request.body()
    if len(raw) > _INLINE_PARSE_BYTES:  # parsed on a thread: the loop keeps serving streams
        data = await asyncio.to_thread(read_json_object, raw)
    else:
        data = read_json_object(raw)
    try:
        parsed = model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        param = _param(error["loc"], data, error["type"])
        message = error["msg"].removeprefix("Value error, ")
        named = message.split(":", 1)[0]
        if not param and named in model.model_fields:  # a check across fields names one
            param, message = named, message.split(":", 1)[1].strip()
        text = f"{param}: {message}" if param else message
        raise APIError(400, text, param=param or None, code="invalid_request") from exc
    unknown = parsed.unknown_fields()
    if unknown:
        logger.debug("%s: ignoring fields %s", request.url.path, ", ".join(unknown))
    return parsed


def _param(loc: tuple[int | str, ...], data: Any, kind: str) -> str:
    """The dotted path of the offending value in the body as sent.

    pydantic's ``loc`` also holds the tags of tagged unions (``tool_use``, ``other``);
    only the parts that index into the body are kept, and a missing field's own name.
    """
    path: list[str] = []
    current = data
    for i, part in enumerate(loc):
        if _indexes(current, part):
            current = current[part]
        elif not (i == len(loc) - 1 and kind == "missing"):
            continue
        path.append(str(part))
    return ".".join(path)


def _indexes(container: Any, part: int | str) -> bool:
    if isinstance(container, dict):
        return part in container
    return isinstance(container, list) and isinstance(part, int) and 0 <= part < len(container)


def _anthropic_errors(handler: Handler) -> Handler:
    """Answer :class:`APIError` in Anthropic's shape, with its status and headers."""

    @functools.wraps(handler)
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except APIError as exc:
            body = protocol.error_body(exc.status, exc.message)
            return JSONResponse(body, status_code=exc.status, headers=exc.headers)
        except ClientGone:
            logger.info("%s: the client went away; generation cancelled", request.url.path)
            return Response(status_code=499)

    return wrapped
