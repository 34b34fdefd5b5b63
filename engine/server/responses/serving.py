"""``/v1/responses``: create (whole or streamed), read back and delete stored responses.

A request is parsed and validated (:mod:`protocol`), continued from its previous response
(:mod:`store`), translated into the pipeline's request (:mod:`translate`), run, and
rendered (:mod:`render`). With ``store`` (the default, as in OpenAI's API) the response is
written before the client learns it is complete, so a ``previous_response_id`` sent right
after always finds it.

Stored responses are bounded before the request runs: one whose stored form (its input,
the conversation before it, and what the response echoes) would pass the store's
``max_response_bytes`` is a 400 naming the largest field, so nothing is generated only to be
dropped. With an API key, responses belong to it: another key's ids are 404.

Runs on the server's event loop; the store's file work goes to a thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.echo import clip
from engine.server.errors import APIError
from engine.server.json_body import read_json_object
from engine.server.pipeline import GenerateRequest, PipelineEvent, Reply, Started
from engine.server.responses import objects, protocol
from engine.server.responses.render import ResponseRenderer, whole
from engine.server.responses.store import ResponseStore, StoredResponse
from engine.server.responses.translate import Turn, translate
from engine.server.streaming import ClientGone, EventStreamResponse, unless_disconnected

logger = logging.getLogger(__name__)

_INLINE_PARSE_BYTES = 256 * 1024
# Room kept in a stored response for the answer itself (128K tokens of 4 bytes).
_ANSWER_ROOM = 512 * 1024
# What a response object echoes of its request, beside its input (in the stored context).
_ECHOED = ("instructions", "tools", "tool_choice", "text", "metadata", "user")


class ReplyStream(Protocol):
    """A started generation, as :meth:`ResponsesPipeline.start` returns it."""

    @property
    def started(self) -> Started: ...

    def __aiter__(self) -> AsyncIterator[PipelineEvent]: ...

    def cancel(self) -> None: ...


class ResponsesPipeline(Protocol):
    """What this dialect needs of the request pipeline (``engine.server.pipeline``)."""

    async def start(self, request: GenerateRequest) -> ReplyStream: ...

    async def collect(self, request: GenerateRequest) -> Reply: ...


class ResponsesServing:
    def __init__(
        self, pipeline: ResponsesPipeline, store: ResponseStore, *, owner: str | None = None
    ) -> None:
        self._pipeline = pipeline
        self._store = store
        self._owner = owner

    async def create(self, request: Request) -> Response:
        body = protocol.parse_request(await _json(request))
        unknown = body.unknown_fields()
        if unknown:
            logger.info("/v1/responses: ignoring unknown fields %s", ", ".join(unknown))
        history = None
        if body.previous_response_id is not None:
            history = (
                await self._stored(body.previous_response_id, "previous_response_id")
            ).history()
        turn = translate(body, history)
        response_id, created = objects.new_id("resp"), objects.now()
        if body.store:  # sizes whole JSON documents: off the loop
            await asyncio.to_thread(self._check_storable, body, turn, response_id, created)
        if body.stream:
            generation = await self._pipeline.start(turn.request)  # errors before any byte
            renderer = self._renderer(body, turn, response_id, created, generation.started.model)
            return EventStreamResponse(self._events(generation, renderer, turn, body.store))
        try:
            reply = await unless_disconnected(request, self._pipeline.collect(turn.request))
        except ClientGone:
            logger.info("/v1/responses: the client went away; generation cancelled")
            return Response(status_code=499)
        renderer = self._renderer(body, turn, response_id, created, reply.started.model)
        answer = whole(renderer, reply)
        if body.store:
            await self._keep(answer, turn)
        return JSONResponse(answer)

    async def get(self, request: Request) -> Response:
        stored = await self._stored(request.path_params["response_id"], None)
        return JSONResponse(stored.response)

    async def delete(self, request: Request) -> Response:
        response_id = request.path_params["response_id"]
        if not await asyncio.to_thread(self._store.delete, response_id, self._owner):
            raise _not_found(response_id, None)
        return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})

    @staticmethod
    def _renderer(
        body: protocol.ResponsesRequest, turn: Turn, response_id: str, created: int, model: str
    ) -> ResponseRenderer:
        response = objects.response_object(
            body, response_id=response_id, created_at=created, model=model, tools=turn.tools
        )
        return ResponseRenderer(
            response, as_summary=body.summary is not None, namespaces=turn.namespaces
        )

    async def _events(
        self, generation: ReplyStream, renderer: ResponseRenderer, turn: Turn, store: bool
    ) -> AsyncIterator[str]:
        """The SSE body; a client that leaves mid-stream cancels the generation."""
        try:
            for event in renderer.start():
                yield _sse(event)
            try:
                async for item in generation:
                    events = renderer.feed(item)
                    if renderer.finished and store:
                        await self._keep(renderer.response, turn)
                    for event in events:
                        yield _sse(event)
            except APIError as exc:  # the engine failed mid-stream
                events = renderer.fail(exc)
                if store:
                    await self._keep(renderer.response, turn)
                for event in events:
                    yield _sse(event)
        finally:
            if not renderer.finished:
                generation.cancel()

    def _check_storable(
        self, body: protocol.ResponsesRequest, turn: Turn, response_id: str, created: int
    ) -> None:
        """Refuse, before any work, a response too large to store (400 naming the field).

        The answer's own room (:data:`_ANSWER_ROOM`) is kept free: what the model writes is
        bounded by the context, not known yet.
        """
        response = objects.response_object(
            body,
            response_id=response_id,
            created_at=created,
            model=clip(body.model),  # the served model's id, once resolved: a short name
            tools=turn.tools,
        )
        sizes = {key: _json_size(response[key]) for key in _ECHOED}
        sizes["text.format"] = sizes.pop("text")
        previous = len(turn.context) - len(body.input)
        if previous:
            sizes["previous_response_id"] = sum(_json_size(i) for i in turn.context[:previous])
        for i, item in enumerate(turn.context[previous:]):
            sizes[f"input.{i}"] = _json_size(item)
        total = _json_size(response) + sum(sizes[f] for f in sizes if f.startswith("input."))
        total += sizes.get("previous_response_id", 0)
        most = self._store.max_response_bytes
        limit = max(most - _ANSWER_ROOM, most // 2)
        if total > limit:
            field = max(sizes, key=lambda f: sizes[f])
            raise APIError(
                400,
                f"{field}: the response would take {total} bytes to store, more than the "
                f"{limit} a stored response may take (the largest part is {field}, "
                f"{sizes[field]} bytes); send less, or store: false",
                param=field,
                code="response_too_large",
            )

    async def _keep(self, response: dict[str, Any], turn: Turn) -> None:
        stored = StoredResponse(response, turn.context)
        await asyncio.to_thread(self._store.save, stored, self._owner)

    async def _stored(self, response_id: str, param: str | None) -> StoredResponse:
        stored = await asyncio.to_thread(self._store.load, response_id, self._owner)
        if stored is None:
            raise _not_found(response_id, param)
        return stored


async def _json(request: Request) -> dict[str, Any]:
    raw = await request.body()
    # A large body (Codex sends 40 kB and more) is parsed on a thread: streams keep flowing.
    if len(raw) > _INLINE_PARSE_BYTES:
        return await asyncio.to_thread(read_json_object, raw)
    return read_json_object(raw)


def _not_found(response_id: str, param: str | None) -> APIError:
    where = f"{param}: " if param else ""
    return APIError(
        404,
        f"{where}no stored response with id '{clip(response_id)}' (it expired, was deleted, or was created "
        "with store: false)",
        param=param,
        code="response_not_found",
    )


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _sse(event: dict[str, Any]) -> str:
    data = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event['type']}\ndata: {data}\n\n"
