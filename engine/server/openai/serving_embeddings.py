"""``POST /v1/embeddings``: vectors from an embedding model, computed in the engine worker.

The embedding model is named by the request (a stored model whose task is ``embeddings``)
and runs beside the chat model in the worker, so indexing never evicts the chat model.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.server.errors import APIError
from engine.server.openai import protocol
from engine.server.pipeline.engine import Encoders, no_room, request_failed, unavailable
from engine.server.pipeline.models import ModelResolver
from engine.server.request_body import parse_body
from engine.server.streaming import unless_disconnected
from engine.supervisor.states import EngineUnavailable, NoRoom, RequestFailed


class EmbeddingServing:
    def __init__(self, resolver: ModelResolver, engine: Encoders) -> None:
        self._resolver = resolver
        self._engine = engine

    async def create(self, request: Request) -> Response:
        body = await parse_body(request, protocol.EmbeddingRequest)
        spec = await self._resolver.embedding_model(body.model)
        try:
            result = await unless_disconnected(request, self._engine.embed(spec, body.texts()))
        except NoRoom as exc:
            raise no_room(exc) from exc
        except EngineUnavailable as exc:
            raise unavailable(exc) from exc
        except RequestFailed as exc:
            raise request_failed(exc, "embedding_failed") from exc
        vectors = result.vectors
        if body.dimensions is not None:
            if body.dimensions > len(vectors[0]):
                raise APIError(
                    400,
                    f"dimensions: {spec.id} has {len(vectors[0])} dimensions",
                    param="dimensions",
                )
            vectors = [_renormalized(v[: body.dimensions]) for v in vectors]
        return JSONResponse(
            protocol.embedding_list(spec.id, vectors, body.encoding_format, result.prompt_tokens)
        )


def _renormalized(vector: list[float]) -> list[float]:
    """A truncated (Matryoshka-style) vector scaled back to unit length."""
    norm = sum(x * x for x in vector) ** 0.5
    return [x / norm for x in vector] if norm else vector
