"""Embeddings and rerank for remote models: the :class:`Encoders` the routes are given,
sending a remote model's texts to its server and every other model's to the local
scheduler. The routes never learn which (they call ``embed``/``rerank`` with the spec the
resolver gave them; a remote spec has format ``remote``).

Threading: the server's event loop, as the routes.
"""

from __future__ import annotations

from engine.models import ModelSpec
from engine.server.errors import APIError
from engine.server.pipeline.engine import Encoders, RemoteModels, RemoteTarget
from engine.server.remote.catalog import REMOTE_FORMAT
from engine.worker.messages import Embedded, Reranked


class RemoteEncoders:
    """``local`` for local models, the remote's own endpoints for ``MODEL@NAME``."""

    def __init__(self, local: Encoders, remotes: RemoteModels | None) -> None:
        self._local = local
        self._remotes = remotes

    async def embed(
        self, spec: ModelSpec, texts: list[str], device: str | None = None, truncate: bool = False
    ) -> Embedded:
        if spec.format != REMOTE_FORMAT:
            return await self._local.embed(spec, texts, device, truncate)
        return await self._target(spec).embed(texts)

    async def rerank(
        self, spec: ModelSpec, query: str, documents: list[str], device: str | None = None
    ) -> Reranked:
        if spec.format != REMOTE_FORMAT:
            return await self._local.rerank(spec, query, documents, device)
        return await self._target(spec).rerank(query, documents)

    def _target(self, spec: ModelSpec) -> RemoteTarget:
        target = self._remotes.target(spec.id) if self._remotes is not None else None
        if target is None:  # removed from the registry since the model was resolved
            raise APIError(404, f"'{spec.id}': its remote is no longer registered", param="model")
        return target
