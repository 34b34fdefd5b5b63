"""Routes of the OpenAI-compatible API: parse, call the serving object, return."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from engine.server.openai.serving import OpenAIServing
from engine.server.openai.serving_chat import ChatServing
from engine.server.openai.serving_completions import CompletionServing
from engine.server.openai.serving_embeddings import EmbeddingServing


def openai_routes(serving: OpenAIServing) -> list[Route]:
    chat = ChatServing(serving)
    completions = CompletionServing(serving)
    embeddings = EmbeddingServing(serving)

    async def list_models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": await serving.model_cards()})

    async def get_model(request: Request) -> Response:
        return JSONResponse(await serving.model_card(request.path_params["model_id"]))

    return [
        Route("/v1/chat/completions", chat.create, methods=["POST"]),
        Route("/v1/completions", completions.create, methods=["POST"]),
        Route("/v1/embeddings", embeddings.create, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", get_model, methods=["GET"]),
    ]
