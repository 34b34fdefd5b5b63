"""Routes of the OpenAI-compatible API: parse, call the serving object, return.

``GET /v1/models`` is shared with Anthropic's API: a request carrying ``anthropic-version``
(the ``anthropic`` SDKs, Claude Code's model discovery) gets Anthropic's list shape.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from engine.server.anthropic import protocol as anthropic
from engine.server.openai.serving import OpenAIServing
from engine.server.openai.serving_chat import ChatServing
from engine.server.openai.serving_completions import CompletionServing
from engine.server.openai.serving_embeddings import EmbeddingServing


def openai_routes(serving: OpenAIServing) -> list[Route]:
    chat = ChatServing(serving)
    completions = CompletionServing(serving)
    embeddings = EmbeddingServing(serving)

    async def list_models(request: Request) -> Response:
        cards = await serving.model_cards()
        if "anthropic-version" in request.headers:
            return JSONResponse(anthropic.model_page(cards))
        return JSONResponse({"object": "list", "data": cards})

    async def get_model(request: Request) -> Response:
        card = await serving.model_card(request.path_params["model_id"])
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
