"""Which model serves a request: lookup (case-insensitive), on-demand loading, refusals.

Shared by every dialect's generation (through :class:`engine.server.pipeline.Pipeline`) and
by the embedding and rerank routes. Runs on the event loop; waiting for a load happens on a
thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable

from engine.echo import clip
from engine.models import GENERATIVE_TASKS, ModelError, ModelSpec, ModelTask, verify_files
from engine.server.errors import APIError
from engine.server.model_info import ModelDirectory
from engine.server.monitor import note_model
from engine.server.pipeline.engine import (
    EngineLike,
    ModelEngine,
    RemoteModels,
    RemoteTarget,
    no_room,
    unavailable,
)
from engine.store import ModelStore, StoreError
from engine.supervisor.states import ERROR, LOADING, READY, EngineUnavailable, NoRoom

logger = logging.getLogger(__name__)

# Where a model that does not chat is used, and what it is (a chat request's refusal).
_ROUTES = {
    "embeddings": ("/v1/embeddings", "an embedding model"),
    "rerank": ("/v1/rerank", "a reranker"),
    "transcription": ("/v1/audio/transcriptions", "a speech recognition model"),
    "speech": ("/v1/audio/speech", "a text-to-speech model"),
}

# How long a request waits for its model: Settings.load_wait_seconds (the engine's acquire).
RETRY_AFTER_SECONDS = 5


class ModelResolver:
    """Models a request may name: the loaded ones (one may have come from a path) and
    every model in the store; naming a stored model that is not loaded loads it in a worker
    of its own (the scheduler), beside the others. A name ``MODEL@NAME`` of a registered
    remote server (``remotes``) is that server's: :meth:`remote` says so, nothing loads."""

    def __init__(
        self,
        engine: EngineLike,
        store: ModelStore | None,
        models: ModelDirectory,
        remotes: RemoteModels | None = None,
    ) -> None:
        self.engine = engine
        self.store = store
        self.models = models
        self.remotes = remotes

    def remote(self, name: str) -> RemoteTarget | None:
        """The remote model ``name`` names (``MODEL@NAME`` of a registered remote), else
        None: local models never go this way, whatever their id."""
        if self.remotes is None or "@" not in name:
            return None
        target = self.remotes.target(name)
        if target is not None:
            note_model(requested=name)
            note_model(target.spec.id)
        return target

    async def chat_model(self, name: str) -> ModelSpec:
        """The spec to generate ``name`` with (see :meth:`chat_engine`); a remote model's
        local face (nothing is loaded here for it)."""
        target = self.remote(name)
        if target is not None:
            return target.spec
        spec, _ = await self.chat_engine(name)
        return spec

    async def chat_engine(self, name: str) -> tuple[ModelSpec, ModelEngine]:
        """The spec to generate ``name`` with and the engine (worker) serving it, loading
        it from the store when needed. Other loaded models keep serving: the scheduler
        gives each model a worker of its own and never cancels a request to make room.

        ``name`` may differ from the id in case and surrounding spaces: a request for
        ``TINY-CODER`` is served by (and never reloads) the loaded ``tiny-coder``.

        Raises:
            APIError: 404 for an unknown (or path-like) name; 400 for an embedding model;
                422 for a damaged one; 503 with Retry-After while a model takes longer than
                the load wait to load, or while busy models hold the memory it needs; 500
                when loading failed.
        """
        note_model(requested=name)
        self.models.status()  # notes the default model (perhaps from a path) in seen
        name = self.models.canonical(name)
        engine = self.engine.running(name)
        if engine is not None:
            status = engine.status()
            if status.model is not None:
                self.models.seen.setdefault(status.model.id, status.model)
                note_model(status.model.id)
                return status.model, engine
        seen = self.models.seen.get(name)
        # Reading and checking the files (a few MB for a GGUF, an IR's XML; a whole hash
        # when a stored GGUF changed) stays off the event loop.
        spec = await asyncio.to_thread(self._spec_to_load, name, seen)
        if spec.task not in GENERATIVE_TASKS:
            route, what = _ROUTES[spec.task]
            raise APIError(
                400,
                f"'{clip(name)}' is {what}; use POST {route} with it",
                param="model",
                code="model_not_generative",
            )
        logger.info("request for %s: loading it", name)
        try:
            engine = await asyncio.to_thread(
                self.engine.acquire, spec, spec.prefs.device or self.engine.status().device, None
            )
        except NoRoom as exc:
            raise no_room(exc) from exc
        except EngineUnavailable as exc:
            if exc.state == LOADING:  # start-up work before the load took the whole wait
                raise still_loading(name, str(exc)) from exc
            raise unavailable(exc) from exc
        status = engine.status()
        if status.state == READY and status.model is not None and status.model.id == name:
            self.models.seen.setdefault(name, status.model)
            note_model(name)
            return status.model, engine
        if status.state == ERROR:
            if status.damaged:  # the worker refused the files (changed since our check)
                raise _damaged(name, status.damaged)
            raise APIError(
                500, status.message or f"could not load {name}", code="model_load_failed"
            )
        raise still_loading(name)

    async def embedding_model(self, name: str) -> ModelSpec:
        """The embedding model ``name`` (from the store, or seen this session).

        Raises:
            APIError: 404 for an unknown name, 400 when ``name`` is not an embedding model.
        """
        spec = await self._encoder(name, "embeddings")
        if spec.task != "embeddings":
            raise APIError(
                400,
                f"'{spec.id}' is not an embedding model; embeddings need one (e.g. bge, e5, "
                "nomic-embed) in the model store",
                param="model",
                code="model_not_embedding",
            )
        return spec

    async def rerank_model(self, name: str) -> ModelSpec:
        """The reranker ``name`` (from the store, or seen this session).

        Raises:
            APIError: 404 for an unknown name, 400 when ``name`` is not a reranker.
        """
        spec = await self._encoder(name, "rerank")
        if spec.task != "rerank":
            raise APIError(
                400,
                f"'{spec.id}' is not a reranker; reranking needs a cross-encoder (e.g. "
                "bge-reranker) in the model store",
                param="model",
                code="model_not_reranker",
            )
        return spec

    async def transcription_model(self, name: str) -> ModelSpec:
        """The speech recogniser ``name`` (from the store, or seen this session).

        Raises:
            APIError: 404 for an unknown name, 400 when ``name`` is not a speech recogniser
                (a remote server's model included: audio is not passed on to remotes).
        """
        if self.remote(name) is not None:
            raise APIError(
                400,
                f"'{clip(name)}' is a model on a remote server: Sidelight does not pass "
                "audio on to remote servers yet",
                param="model",
                code="model_not_transcription",
            )
        spec = await self._encoder(name, "transcription")
        if spec.task != "transcription":
            raise APIError(
                400,
                f"'{spec.id}' is not a speech recognition model; transcription needs one "
                "(e.g. whisper) in the model store",
                param="model",
                code="model_not_transcription",
            )
        return spec

    async def speech_model(self, name: str) -> ModelSpec:
        """The text-to-speech model ``name`` (from the store, or seen this session).

        Raises:
            APIError: 404 for an unknown name, 400 when ``name`` is not a text-to-speech
                model (a remote server's model included: speech is not asked of remotes).
        """
        if self.remote(name) is not None:
            raise APIError(
                400,
                f"'{clip(name)}' is a model on a remote server: Sidelight does not ask remote "
                "servers for speech yet",
                param="model",
                code="model_not_speech",
            )
        spec = await self._encoder(name, "speech")
        if spec.task != "speech":
            raise APIError(
                400,
                f"'{spec.id}' is not a text-to-speech model; speech needs one (e.g. speecht5) "
                "in the model store",
                param="model",
                code="model_not_speech",
            )
        return spec

    async def _encoder(self, name: str, task: ModelTask) -> ModelSpec:
        """The encoder ``name`` (no load here: ``Scheduler.embed``/``rerank`` load it in a
        worker of its own when the request runs). A remote model whose listing states no
        task is taken to be ``task``: the remote answers for it."""
        target = self.remote(name)
        if target is not None:
            spec = target.spec
            return spec if spec.task != "chat" else dataclasses.replace(spec, task=task)
        note_model(requested=name)
        self.models.status()  # notes the loaded model (perhaps from a path) in seen
        name = self.models.canonical(name)
        seen = self.models.seen.get(name)
        # Reading the store (manifest, config) and checking the files stays off the loop.
        spec = await asyncio.to_thread(self._spec_to_load, name, seen)
        note_model(spec.id)
        return spec

    def _from_store(self, name: str, read: Callable[[ModelStore], ModelSpec]) -> ModelSpec:
        """``read`` the store for ``name``: unknown (or path-like) is a 404, damaged a 422."""
        if self.store is None:
            raise not_found(name)
        try:
            return read(self.store)
        except StoreError as exc:  # path-like ids land here too, before any file access
            raise not_found(name) from exc
        except ModelError as exc:
            raise _damaged(name, exc) from exc

    def _spec_to_load(self, name: str, seen: ModelSpec | None) -> ModelSpec:
        """The spec of ``name`` with its files checked right before a load (on a thread).

        A stored model is read from the store again, its files checked and, for a GGUF, its
        content compared with the record taken at import (``ModelStore.spec_to_load``); a
        model seen from a path (no record) has its files checked (``verify_files``). Both
        are cheap when nothing changed and re-validate whatever did: a file rewritten since
        it was last loaded is a 422 here, not a crash or garbage in the worker.
        """
        if seen is not None and not self._in_store(seen):
            if not seen.path.exists():
                return seen  # gone: the worker's own check answers (a scripted engine: none)
            try:
                verify_files(seen)
            except ModelError as exc:
                raise _damaged(seen.id, exc) from exc
            return seen
        return self._from_store(name, lambda store: store.spec_to_load(name))

    def _in_store(self, spec: ModelSpec) -> bool:
        if self.store is None:
            return False
        return spec.path.is_relative_to(self.store.root.resolve())


def not_found(name: str) -> APIError:
    return APIError(
        404,
        f"The model '{clip(name)}' does not exist; see GET /v1/models",
        param="model",
        code="model_not_found",
    )


def _damaged(name: str, exc: Exception | str) -> APIError:
    # 422: the request is fine but names a model whose files cannot be served; the fix is
    # the person's (remove or re-download it), not a retry.
    return APIError(
        422,
        f"the model '{clip(name)}' is damaged: {exc}; remove it (sidelight rm) and download it again",
        param="model",
        code="model_damaged",
    )


def still_loading(name: str, why: str | None = None) -> APIError:
    """503 + Retry-After for a model whose load takes longer than the request may wait."""
    return APIError(
        503,
        why or f"{clip(name)} is still loading; retry shortly",
        code="model_loading",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )
