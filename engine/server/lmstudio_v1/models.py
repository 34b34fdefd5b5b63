"""``GET /api/v1/models``, ``POST /api/v1/models/load`` and ``/unload``.

Sidelight runs one chat model at a time (embedding models load beside it on first use), so
a model has at most one loaded instance, whose id is the model's key. Loading goes through
the pipeline's model resolution (the same path a chat naming a stored model takes);
unloading stops the engine's chat model, and the next chat naming a model loads it again.
Loading an embedding model, and downloads, are answered 501 with what to do instead.

Runs on the server's event loop; waiting for the engine happens on a thread.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.echo import clip
from engine.models import ModelSpec
from engine.server.errors import APIError
from engine.server.lmstudio_v1 import protocol
from engine.server.model_info import ModelDirectory, ModelInfo
from engine.server.request_body import parse_body
from engine.supervisor.states import READY, EngineStatus

DOWNLOAD_HINT = (
    "Sidelight downloads models in the tray's model manager or with `sidelight pull`; "
    "GET /api/v1/models lists what is there"
)


class ModelLoader(Protocol):
    """What these routes ask of the pipeline (:class:`engine.server.pipeline.Pipeline`)."""

    @property
    def models(self) -> ModelDirectory: ...

    async def resolve_model(self, name: str) -> ModelSpec: ...


class _Worker(Protocol):
    def set_keep_alive(self, seconds: float) -> None: ...


class EngineControl(Protocol):
    """What unloading asks of the engine (:class:`engine.server.pipeline.EngineLike` has
    it): a model's worker, and ending it by id (which blocks while the worker exits:
    called on a thread)."""

    def running(self, model_id: str) -> _Worker | None: ...

    def unload(self, model_id: str, reason: str = "unloaded") -> bool: ...


class ModelServing:
    def __init__(self, loader: ModelLoader, engine: EngineControl) -> None:
        self._loader = loader
        self._models = loader.models
        self._engine = engine

    async def list_models(self, request: Request) -> Response:
        loaded = self._models.loaded_contexts()  # every model with a worker of its own
        entries = [
            protocol.model_entry(
                info, (loaded[info.id] or info.context_length or 0) if info.id in loaded else None
            )
            for info in await self._models.all()
        ]
        return JSONResponse({"models": entries})

    async def load(self, request: Request) -> Response:
        body = await parse_body(request, protocol.LoadRequest)
        info = await self._find(body.model, "model")
        if info.task == "embeddings":
            raise APIError(
                501,
                f"'{info.id}' is an embedding model: it loads beside the chat model on its "
                "first POST /v1/embeddings request",
                param="model",
                code="not_implemented",
            )
        limit = info.context_length
        if body.context_length is not None and limit and body.context_length > limit:
            raise APIError(
                400,
                f"context_length: '{info.id}' holds at most {limit} tokens of context",
                param="context_length",
                code="invalid_request",
            )
        started = time.perf_counter()
        spec = await self._loader.resolve_model(info.id)
        answer: dict[str, Any] = {
            "type": "llm",
            "instance_id": spec.id,
            "load_time_seconds": round(time.perf_counter() - started, 3),
            "status": "loaded",
        }
        if body.echo_load_config:
            context = self._models.status().context_length or limit or 0
            answer["load_config"] = {"context_length": context}
        return JSONResponse(answer)

    async def unload(self, request: Request) -> Response:
        body = await parse_body(request, protocol.UnloadRequest)
        wanted = self._models.canonical(body.instance_id)
        default = _loaded(self._models.status())
        worker = self._engine.running(wanted)
        if wanted != default and worker is None:
            raise APIError(
                404,
                f"instance_id: no loaded model instance '{_shown(body.instance_id)}'; "
                "GET /api/v1/models lists the loaded instances",
                param="instance_id",
                code="model_not_found",
            )
        # By id through the scheduler: an embedding model's worker holds no chat model, so
        # its client's own release() would have nothing to unload and would keep it.
        gone = await asyncio.to_thread(self._engine.unload, wanted, "unloaded")
        if not gone and worker is not None:
            worker.set_keep_alive(0)  # busy: it goes once its requests end
        return JSONResponse({"instance_id": wanted})

    async def download(self, request: Request) -> Response:
        raise APIError(501, f"downloading models over the API is not supported; {DOWNLOAD_HINT}")

    async def _find(self, name: str, param: str) -> ModelInfo:
        info = await self._models.find(name)
        if info is None:
            raise APIError(
                404,
                f"{param}: no model '{_shown(name)}'; GET /api/v1/models lists them",
                param=param,
                code="model_not_found",
            )
        return info


def _loaded(status: EngineStatus) -> str | None:
    return status.model.id if status.model is not None and status.state == READY else None


def _shown(name: str) -> str:
    return clip(name)
