"""Routes of LM Studio's native REST API v1: parse, translate, run the pipeline, render.

``POST /api/v1/chat`` (whole, or streamed as named SSE events), ``GET /api/v1/models``,
``POST /api/v1/models/load`` and ``/unload``; downloads are a 501. Chats are stateful as
in LM Studio: with ``store`` (the default) the conversation is kept, written before the
client learns the reply is complete, and its ``response_id`` continues it through
``previous_response_id``. Every error, including one raised by the pipeline (an unknown
model is a 404, a prompt over the context a 400), is answered in LM Studio's shape
(:func:`protocol.error_body`); so is anything refused before these routes run (the
middleware, an unexpected failure): :data:`LMSTUDIO_V1_ERRORS` is the app's error shape here.

Register these before the Ollama routes, whose last route catches every other ``/api`` path;
the last route here answers other ``/api/v1`` paths (404) and methods (405) in this shape.

Runs on the server's event loop; the store's file work goes to a thread.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from engine.echo import clip
from engine.server.errors import APIError, ErrorShape
from engine.server.lmstudio_v1 import protocol, translate
from engine.server.lmstudio_v1.models import EngineControl, ModelLoader, ModelServing
from engine.server.lmstudio_v1.render import ChatRenderer, GenerationLike, chat_end
from engine.server.pipeline import GenerateRequest
from engine.server.request_body import parse_body
from engine.server.responses.objects import new_id
from engine.server.responses.store import ResponseStore, StoredResponse
from engine.server.streaming import ClientGone, EventStreamResponse, unless_disconnected
from engine.supervisor.states import READY

logger = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Response]]
_ANY_METHOD = ["GET", "POST", "PUT", "DELETE", "PATCH"]

# Paths below /api/v1/ only: /api/v1 itself falls to Ollama's /api, as its route does.
LMSTUDIO_V1_ERRORS = ErrorShape(("/api/v1/*",), protocol.error_body)


class ChatPipeline(ModelLoader, Protocol):
    """What this dialect asks of :class:`engine.server.pipeline.Pipeline`."""

    async def start(self, request: GenerateRequest) -> GenerationLike: ...


def lmstudio_v1_routes(
    pipeline: ChatPipeline, engine: EngineControl, chats: ResponseStore
) -> list[Route]:
    """The ``/api/v1`` routes, generating through ``pipeline``; ``chats`` keeps the
    conversations ``previous_response_id`` continues."""
    chat = ChatServing(pipeline, chats)
    models = ModelServing(pipeline, engine)
    routes: list[tuple[str, Handler, str]] = [
        ("/api/v1/chat", chat.chat, "POST"),
        ("/api/v1/models", models.list_models, "GET"),
        ("/api/v1/models/load", models.load, "POST"),
        ("/api/v1/models/unload", models.unload, "POST"),
        ("/api/v1/models/download", models.download, "POST"),
        ("/api/v1/models/download/status", models.download, "GET"),
        ("/api/v1/models/download/status/{job_id}", models.download, "GET"),
    ]
    known = {path for path, _, _ in routes}

    async def no_route(request: Request) -> Response:
        # Matched only when no route above took the request: a wrong method or path.
        path = "/api/v1/" + request.path_params["rest"]
        if path in known:
            raise APIError(405, f"method {request.method} is not allowed on {path}")
        raise APIError(404, f"no route for {request.method} {path}")

    return [
        *(Route(path, _v1_errors(handler), methods=[m]) for path, handler, m in routes),
        # Last: keeps other /api/v1 paths from Ollama's /api catch-all and its error shape.
        Route("/api/v1/{rest:path}", _v1_errors(no_route), methods=_ANY_METHOD),
    ]


class ChatServing:
    def __init__(self, pipeline: ChatPipeline, chats: ResponseStore) -> None:
        self._pipeline = pipeline
        self._chats = chats

    async def chat(self, request: Request) -> Response:
        body = await parse_body(request, protocol.ChatRequest)
        history = None
        if body.previous_response_id is not None:
            history = await self._history(body.previous_response_id)
        info = await self._pipeline.models.find(body.model)
        turn = translate.chat_turn(body, history, info)
        if body.stream:  # every refusal before the first byte
            load_seconds = await self._warm(body.model)
            generation = await self._pipeline.start(turn.request)
            renderer = ChatRenderer(generation.started, load_seconds)
            return EventStreamResponse(self._events(generation, renderer, turn, body.store))
        result = await unless_disconnected(request, self._whole(turn, body.store))
        return JSONResponse(result)

    async def _whole(self, turn: translate.Turn, store: bool) -> dict[str, Any]:
        load_seconds = await self._warm(turn.request.model)
        generation = await self._pipeline.start(turn.request)
        renderer = ChatRenderer(generation.started, load_seconds)
        async for item in generation:
            renderer.feed(item, generation.tokens)
        response_id = await self._keep(renderer, turn) if store else None
        return renderer.result(generation.tokens, response_id)

    async def _events(
        self, generation: GenerationLike, renderer: ChatRenderer, turn: translate.Turn, store: bool
    ) -> AsyncIterator[str]:
        """The SSE body; a client that leaves mid-stream cancels the generation."""
        try:
            for event in renderer.start():
                yield protocol.event(event)
            try:
                async for item in generation:
                    for event in renderer.feed(item, generation.tokens):
                        yield protocol.event(event)
            except APIError as exc:  # the engine failed mid-stream
                for event in renderer.fail(exc):
                    yield protocol.event(event)
            stored = store and renderer.done is not None
            response_id = await self._keep(renderer, turn) if stored else None
            yield protocol.event(chat_end(renderer.result(generation.tokens, response_id)))
        finally:
            if renderer.done is None:
                generation.cancel()

    async def _warm(self, name: str) -> float | None:
        """Load the model unless it is loaded; the seconds that took (``None``: no load)."""
        models = self._pipeline.models
        status = models.status()
        loaded = status.model.id if status.model is not None and status.state == READY else None
        if loaded is not None and loaded == models.canonical(name):
            return None
        started = time.perf_counter()
        await self._pipeline.resolve_model(name)
        return time.perf_counter() - started

    async def _keep(self, renderer: ChatRenderer, turn: translate.Turn) -> str | None:
        """Store the conversation with its reply; its ``response_id`` (``None``: the disk
        refused it, logged by the store)."""
        response_id = new_id("resp")
        reply: dict[str, Any] = {"role": "assistant", "content": _joined(renderer, "message")}
        reasoning = _joined(renderer, "reasoning")
        if reasoning:
            reply["reasoning_content"] = reasoning
        stored = StoredResponse(
            {"id": response_id, "model_instance_id": renderer.started.model},
            [*turn.messages, reply],
        )
        saved = await asyncio.to_thread(self._chats.save, stored)
        return response_id if saved else None

    async def _history(self, response_id: str) -> list[dict[str, Any]]:
        stored = await asyncio.to_thread(self._chats.load, response_id)
        if stored is None:
            raise APIError(
                404,
                f"previous_response_id: no stored chat with id '{clip(response_id)}' (it expired, or was "
                "created with store: false)",
                param="previous_response_id",
                code="response_not_found",
            )
        return stored.context


def _joined(renderer: ChatRenderer, kind: str) -> str:
    return "".join(item["content"] for item in renderer.output if item["type"] == kind)


def _v1_errors(handler: Handler) -> Handler:
    """Answer :class:`APIError` in LM Studio's shape, with its status and headers."""

    @functools.wraps(handler)
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except APIError as exc:
            body = protocol.error_body(exc.status, exc.message, param=exc.param, code=exc.code)
            return JSONResponse(body, status_code=exc.status, headers=exc.headers)
        except ClientGone:
            logger.info("%s: the client went away; generation cancelled", request.url.path)
            return Response(status_code=499)

    return wrapped
