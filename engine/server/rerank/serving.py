"""Rerank a request's documents with a stored reranker, in the engine worker.

The reranker is named by the request (a stored model whose task is ``rerank``) and runs
beside the chat model, so reranking never evicts the model an IDE chats with. Runs on the
server's event loop; the engine does the work.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.server.pipeline.engine import Encoders, no_room, request_failed, unavailable
from engine.server.pipeline.models import ModelResolver
from engine.server.request_body import parse_body
from engine.server.rerank import protocol
from engine.server.streaming import unless_disconnected
from engine.supervisor.states import EngineUnavailable, NoRoom, RequestFailed


class RerankServing:
    def __init__(self, resolver: ModelResolver, engine: Encoders) -> None:
        self._resolver = resolver
        self._engine = engine

    async def create(self, request: Request) -> Response:
        body = await parse_body(request, protocol.RerankRequest)
        spec = await self._resolver.rerank_model(body.model)
        try:
            result = await unless_disconnected(
                request, self._engine.rerank(spec, body.query, body.texts())
            )
        except NoRoom as exc:
            raise no_room(exc) from exc
        except EngineUnavailable as exc:
            raise unavailable(exc) from exc
        except RequestFailed as exc:
            raise request_failed(exc, "rerank_failed") from exc
        return JSONResponse(
            protocol.rerank_response(spec.id, body, result.scores, result.prompt_tokens)
        )
