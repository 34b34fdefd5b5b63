"""Routes of the OpenAI-compatible API: parse, call the serving object, return."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from engine.models import ModelSpec
from engine.server.errors import APIError
from engine.server.openai import protocol
from engine.server.openai.serving import OpenAIServing
from engine.server.openai.serving_chat import ChatServing
from engine.server.openai.serving_completions import CompletionServing


def openai_routes(serving: OpenAIServing) -> list[Route]:
    chat = ChatServing(serving)
    completions = CompletionServing(serving)

    async def list_models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [_card(s) for s in serving.models()]})

    async def get_model(request: Request) -> Response:
        model_id = request.path_params["model_id"]
        for spec in serving.models():
            if spec.id == model_id:
                return JSONResponse(_card(spec))
        raise APIError(
            404, f"The model '{model_id}' does not exist", param="model", code="model_not_found"
        )

    return [
        Route("/v1/chat/completions", chat.create, methods=["POST"]),
        Route("/v1/completions", completions.create, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", get_model, methods=["GET"]),
    ]


def _card(spec: ModelSpec) -> dict[str, Any]:
    created = int(spec.path.stat().st_mtime) if spec.path.exists() else protocol.now()
    return protocol.model_card(
        spec.id, created, context_length=spec.context_length, format=spec.format
    )
