"""LM Studio's model listing, ``GET /api/v0/models`` and ``GET /api/v0/models/{id}``.

Zed, Cline and Copilot's LM Studio providers list models here (type, load state, context
window, tool use) and then talk to ``/v1``, which Sidelight already serves. Generation is
not duplicated under ``/api/v0``. Errors use LM Studio's shape, ``{"error": "..."}``.

Register these before the Ollama routes, whose last route catches every other ``/api`` path.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from engine.echo import clip
from engine.server.model_info import ModelDirectory, ModelInfo


def lmstudio_routes(models: ModelDirectory) -> list[Route]:
    async def list_models(request: Request) -> Response:
        loaded = set(models.loaded_contexts())
        return JSONResponse(
            {"object": "list", "data": [model_entry(i, loaded) for i in await models.all()]}
        )

    async def get_model(request: Request) -> Response:
        name = request.path_params["model_id"]
        info = await models.find(name)
        if info is None:
            return JSONResponse({"error": f"model '{clip(name)}' not found"}, status_code=404)
        return JSONResponse(model_entry(info, set(models.loaded_contexts())))

    return [
        Route("/api/v0/models", list_models, methods=["GET"]),
        Route("/api/v0/models/{model_id:path}", get_model, methods=["GET"]),
    ]


# LM Studio's model types: a vision-language model is "vlm" (clients enable images by it).
_TYPES = {"embeddings": "embeddings", "vision": "vlm"}


def model_entry(info: ModelInfo, loaded: Collection[str]) -> dict[str, Any]:
    """One model in LM Studio's shape (``loaded``: the ids loaded now, each in a worker)."""
    entry: dict[str, Any] = {
        "id": info.id,
        "object": "model",
        "type": _TYPES.get(info.task, "llm"),
        "publisher": info.publisher,
        "arch": info.architecture or "unknown",
        "compatibility_type": "gguf" if info.format == "gguf" else "openvino",
        "quantization": info.quantization,
        "state": "loaded" if info.id in loaded else "not-loaded",
        "max_context_length": info.context_length or 0,
        "capabilities": ["tool_use"] if info.tools else [],
    }
    if info.id in loaded:
        entry["loaded_context_length"] = info.context_length or 0
    if info.remote is not None:  # served by another server (MODEL@NAME)
        entry["compatibility_type"] = "remote"
        entry["remote"] = info.remote
    return entry
