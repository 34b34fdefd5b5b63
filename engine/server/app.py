"""``create_app``: the HTTP application, built from explicit dependencies (no globals).

Middleware order, outermost first: request monitor (so it sees every refusal), the cap on
requests in flight (a 503 past 64; loopback ``GET /health`` always answered), body limit,
Host check (loopback binds only), cross-site guard, CORS, API key. Everything a request is refused for is checked before its body is
parsed. CORS sits outside the key check so a browser's preflight gets its answer, and a
refused origin is a 403 from the guard, never an ``Access-Control-Allow-Origin`` grant.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect

from engine.server.anthropic.routes import ANTHROPIC_ERRORS, anthropic_routes
from engine.server.audio.routes import audio_routes
from engine.server.auth import ApiKeyMiddleware
from engine.server.body_limit import BodyLimitMiddleware
from engine.server.cross_site import CrossSiteGuard
from engine.server.errors import (
    APIError,
    ErrorShapes,
    handle_api_error,
    handle_disconnect,
    handle_http_exception,
    handle_unexpected,
)
from engine.server.health import HealthSource, health_routes
from engine.server.host_check import HostCheckMiddleware
from engine.server.lmstudio import lmstudio_routes
from engine.server.lmstudio_v1.routes import LMSTUDIO_V1_ERRORS, lmstudio_v1_routes
from engine.server.model_settings import model_settings_routes
from engine.server.monitor.middleware import MonitorMiddleware
from engine.server.monitor.routes import monitor_routes
from engine.server.ollama.routes import OLLAMA_ERRORS, ollama_routes
from engine.server.ollama.serving import OllamaServing
from engine.server.openai.routes import openai_routes
from engine.server.pipeline import Pipeline
from engine.server.pipeline.engine import Encoders, EngineLike, Synthesizer, Transcriber
from engine.server.remote.encoders import RemoteEncoders
from engine.server.request_limit import RequestLimitMiddleware
from engine.server.rerank.routes import rerank_routes
from engine.server.responses.routes import responses_routes
from engine.server.responses.store import ResponseStore, owner_of
from engine.server.streaming import ClientGone
from engine.settings import Settings, is_loopback_host


class ServerEngine(EngineLike, Encoders, Transcriber, Synthesizer, HealthSource, Protocol):
    """Everything the app asks of the engine (the runtime's
    :class:`engine.runtime.ServedEngine`): generations through the pipeline, embeddings and
    rerank, ``/health``, and reading the workers' pipes on the server's loop."""

    def read_on_loop(self) -> None: ...

    def read_on_thread(self) -> None: ...


def create_app(settings: Settings, engine: ServerEngine, pipeline: Pipeline) -> Starlette:
    """Build the Starlette app serving ``/v1``, ``/health``, ``/metrics``, Ollama's and LM
    Studio's ``/api``.

    Every dialect's generations go through ``pipeline``, the one the caller composed
    (:class:`engine.runtime.Runtime`): the chat window shares it, and its store and monitor
    (metrics, the request log) outlive the server. ``engine`` is what ``pipeline`` runs on.
    """
    store, monitor = pipeline.store, pipeline.monitor
    # Embeddings and rerank of a remote model (MODEL@NAME) go to its server.
    encoders = RemoteEncoders(engine, pipeline.remotes)

    routes = [
        *health_routes(engine, monitor.speculation, pipeline.remotes),
        *openai_routes(pipeline, encoders),
        *lmstudio_routes(pipeline.models),
        *responses_routes(
            pipeline,
            ResponseStore(settings.paths.responses_dir),
            owner=owner_of(settings.api_key),
        ),
        *anthropic_routes(pipeline),
        *monitor_routes(monitor),  # before Ollama's: /api/sidelight/requests
        *model_settings_routes(store),  # /api/sidelight/models/{id}/settings
        *lmstudio_v1_routes(pipeline, engine, ResponseStore(settings.paths.lmstudio_chats_dir)),
        *rerank_routes(pipeline.resolver, encoders),
        *audio_routes(
            pipeline.resolver, engine, settings.max_audio_bytes, settings.max_audio_seconds
        ),
        *ollama_routes(OllamaServing(pipeline), encoders),  # last: it ends with an /api catch-all
    ]

    origins = "^(" + "|".join(settings.allowed_origins) + ")$"
    middleware = [
        Middleware(MonitorMiddleware, monitor=monitor, routes=routes),
        Middleware(RequestLimitMiddleware),
        Middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes),
    ]
    if is_loopback_host(settings.host) or not settings.api_key:
        # Bound beyond loopback, clients use names and addresses no list can hold; the
        # API key (required there by Settings.validate) guards instead, as in Ollama.
        hosts = frozenset(settings.allowed_hosts)
        middleware.append(Middleware(HostCheckMiddleware, allowed_hosts=hosts))
    middleware += [
        Middleware(CrossSiteGuard, allowed_origins=re.compile(origins)),
        Middleware(
            CORSMiddleware,
            allow_origin_regex=origins,
            allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
            allow_headers=["authorization", "content-type", "x-api-key"],
            max_age=600,
        ),
    ]
    if settings.api_key:
        middleware.append(Middleware(ApiKeyMiddleware, api_key=settings.api_key))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        engine.read_on_loop()  # tokens reach the streams without a thread hop
        try:
            yield
        finally:
            engine.read_on_thread()

    app = Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={
            APIError: handle_api_error,
            ClientDisconnect: handle_disconnect,
            ClientGone: handle_disconnect,
            HTTPException: handle_http_exception,
            Exception: handle_unexpected,
        },
    )
    # Each API's error shape for its paths, read by the handlers above and the middleware.
    app.state.error_shapes = ErrorShapes([ANTHROPIC_ERRORS, LMSTUDIO_V1_ERRORS, OLLAMA_ERRORS])
    app.state.engine = engine
    app.state.settings = settings
    app.state.store = store
    app.state.monitor = monitor
    return app
