"""``POST /api/embed`` and the legacy ``POST /api/embeddings``.

Ollama embeds with any model; Sidelight embeds with embedding models (``task: embeddings``)
and says so for chat models. The engine keeps the embedding model loaded beside the chat
model, so indexing code never evicts the model a user chats with. Vectors are L2-normalized,
as Ollama's are; ``dimensions`` keeps the first N components and normalizes again.
"""

from __future__ import annotations

import math
import time

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.server.errors import APIError
from engine.server.model_info import ModelInfo
from engine.server.ollama import protocol
from engine.server.ollama.serving import OllamaServing, log_ignored
from engine.server.pipeline.engine import Encoders, no_room, request_failed, unavailable
from engine.server.request_body import parse_body
from engine.supervisor.states import EngineUnavailable, NoRoom, RequestFailed
from engine.worker.messages import Embedded


class EmbedServing:
    def __init__(self, serving: OllamaServing, engine: Encoders) -> None:
        self._serving = serving
        self._engine = engine  # embeddings do not go through the generation pipeline

    async def embed(self, request: Request) -> Response:
        started = time.perf_counter()
        body = await parse_body(request, protocol.EmbedRequest)
        log_ignored(request.url.path, body.options)
        info = await self._embedding_model(body.model)
        result = await self._run(info, body.inputs(), truncate=body.truncate)
        vectors = [_shorten(v, body.dimensions) for v in result.vectors]
        return JSONResponse(
            {
                "model": body.model,
                "embeddings": vectors,
                "total_duration": protocol.nanoseconds(time.perf_counter() - started),
                "load_duration": 0,
                "prompt_eval_count": result.prompt_tokens,
            }
        )

    async def embeddings(self, request: Request) -> Response:
        body = await parse_body(request, protocol.EmbeddingsRequest)
        log_ignored(request.url.path, body.options)
        info = await self._embedding_model(body.model)
        if not body.prompt:
            return JSONResponse({"embedding": []})  # what Ollama answers to an empty prompt
        result = await self._run(info, [body.prompt])
        return JSONResponse({"embedding": result.vectors[0]})

    async def _embedding_model(self, name: str) -> ModelInfo:
        info = await self._serving.find(name)
        if info.task != "embeddings":
            raise APIError(
                400,
                f'"{name}" does not support embeddings; Sidelight embeds with embedding models '
                "(add one with the tray's model manager or sidelight pull)",
            )
        return info

    async def _run(self, info: ModelInfo, texts: list[str], truncate: bool = False) -> Embedded:
        """``truncate`` (``/api/embed``'s, true by default as in Ollama): a text past the
        model's limit is embedded from its first tokens and counted so in
        ``prompt_eval_count``; false refuses it with a 400 naming both numbers."""
        try:
            return await self._engine.embed(info.spec, texts, truncate=truncate)
        except NoRoom as exc:
            raise no_room(exc) from exc
        except EngineUnavailable as exc:
            raise unavailable(exc) from exc
        except RequestFailed as exc:
            raise request_failed(exc) from exc


def _shorten(vector: list[float], dimensions: int | None) -> list[float]:
    if dimensions is None or dimensions >= len(vector):
        return vector
    head = vector[:dimensions]
    norm = math.sqrt(sum(x * x for x in head)) or 1.0
    return [x / norm for x in head]
