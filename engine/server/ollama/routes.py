"""Routes of the Ollama-compatible API: parse, call the serving objects, return.

Errors on ``/api`` use Ollama's shape, ``{"error": "..."}``, which its clients show to the
user as is. The last route catches every other ``/api`` path so those errors keep that
shape too; register these routes after any other ``/api/...`` routes. The middleware's
refusals on ``/``, ``/api`` and below (LM Studio's v0 included) take the same shape through
:data:`OLLAMA_ERRORS`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from engine.server.errors import APIError, ErrorShape
from engine.server.ollama import protocol
from engine.server.ollama.serving import OllamaServing, unsupported
from engine.server.ollama.serving_embed import EmbedServing
from engine.server.ollama.serving_generate import GenerationServing
from engine.server.pipeline.engine import Encoders
from engine.server.request_body import parse_body
from engine.server.streaming import ClientGone

logger = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Response]]
_ANY_METHOD = ["GET", "POST", "PUT", "DELETE", "PATCH"]


def _error_body(
    status: int, message: str, *, param: str | None, code: str | None
) -> dict[str, Any]:
    """``{"error": "..."}``: Ollama's clients show the string as is."""
    return {"error": message}


# Refusals only: the routes answer their own errors (_ollama_errors), and what the app's
# handlers answer under /api (a wrong method, a crash, /api/sidelight's routes) is OpenAI's.
OLLAMA_ERRORS = ErrorShape(("/", "/api", "/api/*"), _error_body, covers="refusals")

# Model management that Ollama does through its API; Sidelight does it in the tray and CLI.
_MANAGEMENT = {
    "/api/pull": ("POST", "pulling models"),
    "/api/push": ("POST", "pushing models"),
    "/api/create": ("POST", "creating models"),
    "/api/copy": ("POST", "copying models"),
    "/api/delete": ("DELETE", "deleting models"),
    "/api/blobs/{digest}": ("POST", "uploading blobs"),
}


def ollama_routes(serving: OllamaServing, engine: Encoders) -> list[Route]:
    generation = GenerationServing(serving)
    embeddings = EmbedServing(serving, engine)

    async def root(request: Request) -> Response:
        return PlainTextResponse("Sidelight is running (Ollama-compatible API)")

    async def version(request: Request) -> Response:
        return JSONResponse({"version": protocol.OLLAMA_VERSION})

    async def tags(request: Request) -> Response:
        return JSONResponse(await serving.tags())

    async def ps(request: Request) -> Response:
        return JSONResponse(await serving.ps())

    async def show(request: Request) -> Response:
        body = await parse_body(request, protocol.ModelRequest)
        return JSONResponse(await serving.show(body.target()))

    def refuse(action: str) -> Handler:
        async def handler(request: Request) -> Response:
            raise unsupported(action)

        return handler

    async def no_route(request: Request) -> Response:
        raise APIError(404, f"no route for {request.method} {request.url.path}")

    routes: list[tuple[str, Handler, str]] = [
        ("/", root, "GET"),
        ("/api/version", version, "GET"),
        ("/api/tags", tags, "GET"),
        ("/api/ps", ps, "GET"),
        ("/api/show", show, "POST"),
        ("/api/chat", generation.chat, "POST"),
        ("/api/generate", generation.generate, "POST"),
        ("/api/embed", embeddings.embed, "POST"),
        ("/api/embeddings", embeddings.embeddings, "POST"),
        *((path, refuse(action), method) for path, (method, action) in _MANAGEMENT.items()),
    ]
    return [
        *(Route(path, _ollama_errors(handler), methods=[m]) for path, handler, m in routes),
        Route("/api/{rest:path}", _ollama_errors(no_route), methods=_ANY_METHOD),
    ]


def _ollama_errors(handler: Handler) -> Handler:
    """Answer :class:`APIError` as ``{"error": message}`` with its status and headers."""

    @functools.wraps(handler)
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except APIError as exc:
            return JSONResponse({"error": exc.message}, status_code=exc.status, headers=exc.headers)
        except ClientGone:
            logger.info("%s: the client went away; generation cancelled", request.url.path)
            return Response(status_code=499)

    return wrapped
