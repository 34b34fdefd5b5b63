"""Routes of the rerank API: ``POST /v1/rerank`` (where Jina's and Cohere's v1 APIs have it)
and ``POST /rerank`` (llama-server answers at both)."""

from __future__ import annotations

from starlette.routing import Route

from engine.server.pipeline.engine import Encoders
from engine.server.pipeline.models import ModelResolver
from engine.server.rerank.serving import RerankServing


def rerank_routes(resolver: ModelResolver, engine: Encoders) -> list[Route]:
    serving = RerankServing(resolver, engine)
    return [
        Route("/v1/rerank", serving.create, methods=["POST"]),
        Route("/rerank", serving.create, methods=["POST"]),
    ]
