"""Routes of OpenAI's Responses API: parse, call the serving object, return."""

from __future__ import annotations

from starlette.routing import Route

from engine.server.responses.serving import ResponsesPipeline, ResponsesServing
from engine.server.responses.store import ResponseStore


def responses_routes(
    pipeline: ResponsesPipeline, store: ResponseStore, *, owner: str | None = None
) -> list[Route]:
    """``POST /v1/responses``, ``GET`` and ``DELETE /v1/responses/{response_id}``; stored
    responses belong to ``owner`` (:func:`engine.server.responses.store.owner_of`)."""
    serving = ResponsesServing(pipeline, store, owner=owner)
    return [
        Route("/v1/responses", serving.create, methods=["POST"]),
        Route("/v1/responses/{response_id}", serving.get, methods=["GET"]),
        Route("/v1/responses/{response_id}", serving.delete, methods=["DELETE"]),
    ]
