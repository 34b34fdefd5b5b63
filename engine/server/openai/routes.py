"""Routes of the OpenAI-compatible API: parse, call the serving object, return.

``GET /v1/models`` is shared with Anthropic's API: a request carrying ``anthropic-version``
(the ``anthropic`` SDKs, Claude Code's model discovery) gets Anthropic's list shape.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from engine.server.anthropic import protocol as anthropic
from engine.server.openai.serving_chat import ChatServing
from engine.server.openai.serving_completions import CompletionServing
from engine.server.openai.serving_embeddings import EmbeddingServing
from engine.server.openai.serving_models import ModelCards
from engine.server.pipeline import Pipeline
from engine.server.pipeline.engine import Encoders


def openai_routes(pipeline: Pipeline, engine: Encoders) -> list[Route]:
    chat = ChatServing(pipeline)
    completions = CompletionServing(pipeline)
    embeddings = EmbeddingServing(pipeline.resolver, engine)
    cards = ModelCards(pipeline.models)

    async def list_models(request: Request) -> Response:
        cards_list = await cards.all()
        if "anthropic-version" in request.headers:
            return JSONResponse(anthropic.model_page(cards_list))
        return JSONResponse({"object": "list", "data": cards_list})

    async def get_model(request: Request) -> Response:
        card = await cards.one(request.path_params["model_id"])
        if "anthropic-version" in request.headers:
            return JSONResponse(anthropic.model_entry(card))
        return JSONResponse(card)

    return [
        Route("/v1/chat/completions", chat.create, methods=["POST"]),
        Route("/v1/completions", completions.create, methods=["POST"]),
        Route("/v1/embeddings", embeddings.create, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", get_model, methods=["GET"]),
    ]
