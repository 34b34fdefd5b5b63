"""The engine as the pipeline sees it, and the engine's failures as :class:`APIError`.

:class:`EngineLike` is what a generation needs of the engine, :class:`ModelEngine` what it
needs of one model's worker, :class:`Encoders` what embeddings and rerank need; the unit
tests put a scripted fake engine behind them (``tests/server/fake_engine.py``), the server
and the desktop app the runtime's :class:`engine.runtime.ServedEngine`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

from engine.models import ModelSpec
from engine.parsing import ReplyEvent
from engine.server.errors import APIError
from engine.server.model_info import ModelInfo
from engine.server.pipeline.events import Done, Logprobs
from engine.server.pipeline.request import GenerateRequest
from engine.supervisor.states import (
    EngineStatus,
    EngineUnavailable,
    LoadedModel,
    NoRoom,
    RequestFailed,
)
from engine.worker.messages import (
    Embedded,
    Finished,
    GenerationRequest,
    RequestAccepted,
    Reranked,
    Synthesize,
    Synthesized,
    TextDelta,
    Transcribe,
    Transcribed,
)

# How each refusal code of the worker reaches a client.
_REJECT_STATUS: dict[str, int] = {
    "context_length_exceeded": 400,
    "invalid_request": 400,
    "fim_unsupported": 400,
    "no_model": 503,
    "engine_restarting": 503,
    "model_damaged": 422,
    "internal": 500,
}


class EngineStream(Protocol):
    """One submitted request (:class:`engine.supervisor.streams.RequestStream`)."""

    @property
    def accepted(self) -> RequestAccepted | None: ...

    async def start(self) -> RequestAccepted:
        """Wait for acceptance; raises :class:`RequestFailed` when refused."""
        ...

    def __aiter__(self) -> AsyncIterator[TextDelta | Finished]: ...

    def cancel(self) -> None:
        """Stop the request in the engine (idempotent, any thread)."""
        ...


class ModelEngine(Protocol):
    """One model's worker as the pipeline uses it
    (:class:`engine.supervisor.client.EngineClient`)."""

    def status(self) -> EngineStatus: ...

    def submit(self, request: GenerationRequest) -> EngineStream:
        """Queue a generation; raises :class:`EngineUnavailable` when no model is ready."""
        ...

    def set_keep_alive(self, seconds: float) -> None:
        """How long the loaded model stays loaded once idle (``math.inf``: forever)."""
        ...

    def expires_at(self) -> datetime | None:
        """When the idle loaded model will be unloaded (None: nothing loaded, or never)."""
        ...

    def release(self, reason: str = "unloaded") -> bool:
        """Unload the model now, freeing its memory; False while a request runs."""
        ...


class EngineLike(Protocol):
    """What the pipeline asks of the engine: each model's worker, placed by the scheduler
    (:class:`engine.supervisor.scheduler.Scheduler`), and the default model's status (the
    one-model view of :class:`engine.runtime.DefaultModel`: new models load on its device,
    listings name it first). Built by :class:`engine.runtime.ServedEngine`; unit tests put
    a scripted fake behind it (``tests/server/fake_engine.py``).
    """

    def status(self) -> EngineStatus:
        """The default model's status."""
        ...

    def acquire(
        self, spec: ModelSpec, device: str | None, timeout: float | None = None
    ) -> ModelEngine:
        """The worker serving ``spec``, loading it when needed and waiting (bounded: by
        default ``Settings.load_wait_seconds``) for room and for the load; blocks (call it
        on a worker thread).

        Raises:
            NoRoom: the memory budget stayed held by busy models for the whole wait.
        """
        ...

    def running(self, model_id: str) -> ModelEngine | None:
        """The worker of ``model_id`` when it is loaded and ready (never blocks)."""
        ...

    def loaded(self) -> list[LoadedModel]:
        """Every loaded (or loading) model."""
        ...

    def unload(self, model_id: str, reason: str = "unloaded") -> bool:
        """End ``model_id``'s worker now; False while it has a request in flight or when it
        is not loaded (blocks while the worker exits: call it on a thread)."""
        ...


class RemoteStream(Protocol):
    """An answer another server generates (:class:`engine.server.remote.RemoteStream`):
    already parsed reply events, then :class:`Done`; a failure mid-stream raises
    :class:`APIError` naming the remote."""

    def __aiter__(self) -> AsyncIterator[ReplyEvent | Logprobs | Done]: ...

    def cancel(self) -> None:
        """Stop reading (any thread): the stream ends at its next chunk, cancelled."""
        ...

    async def aclose(self) -> None:
        """Free the connection (idempotent)."""
        ...


class RemoteTarget(Protocol):
    """One model of a remote server, ``MODEL@NAME`` (:class:`engine.server.remote.RemoteModel`)."""

    @property
    def spec(self) -> ModelSpec:
        """Its local face: id ``MODEL@NAME``, format ``remote``, nothing on disk."""
        ...

    async def start(self, request: GenerateRequest) -> RemoteStream:
        """Send ``request``; returns once the remote accepted it.

        Raises:
            APIError: unreachable 502, slow 504, the remote's own 4xx (its message after
                its name), each naming the remote.
        """
        ...

    async def embed(self, texts: list[str]) -> Embedded:
        """The remote's ``/v1/embeddings`` for ``texts`` (APIError as :meth:`start`)."""
        ...

    async def rerank(self, query: str, documents: list[str]) -> Reranked:
        """The remote's ``/v1/rerank`` scores, in the documents' order (APIError as
        :meth:`start`)."""
        ...


class RemoteModels(Protocol):
    """Which requests go to a remote server (:class:`engine.server.remote.RemoteCatalog`)."""

    def target(self, name: str) -> RemoteTarget | None:
        """The remote model ``name`` names (``MODEL@NAME`` of a registered remote), else None."""
        ...


class RemoteCatalogLike(RemoteModels, Protocol):
    """What the pipeline is given for remotes: :class:`RemoteModels` for requests, and the
    listing :class:`ModelDirectory` adds (:class:`engine.server.remote.RemoteCatalog`)."""

    def infos(self) -> list[ModelInfo]: ...

    def find(self, name: str) -> ModelInfo | None: ...

    def statuses(self) -> dict[str, Any]:
        """``/health``'s ``remotes``: each remote's last refresh."""
        ...


class Encoders(Protocol):
    """What the embedding and rerank endpoints ask of the engine (the scheduler)."""

    async def embed(
        self, spec: ModelSpec, texts: list[str], device: str | None = None, truncate: bool = False
    ) -> Embedded: ...

    async def rerank(
        self, spec: ModelSpec, query: str, documents: list[str], device: str | None = None
    ) -> Reranked: ...


class Transcriber(Protocol):
    """What the audio endpoints ask of the engine (the scheduler): one window at a time."""

    async def transcribe(
        self, spec: ModelSpec, command: Callable[[int, str], Transcribe], device: str | None = None
    ) -> Transcribed: ...


class Synthesizer(Protocol):
    """What the speech endpoint asks of the engine (the scheduler): one piece at a time."""

    async def synthesize(
        self, spec: ModelSpec, command: Callable[[int, str], Synthesize], device: str | None = None
    ) -> Synthesized: ...


def request_failed(
    exc: RequestFailed,
    internal_code: str | None = None,
    field_names: Mapping[str, str] | None = None,
) -> APIError:
    """The HTTP error for a request the engine refused: a 4xx naming the field when the
    request was at fault (``field_names``: the dialect's name for each engine field);
    ``internal_code`` replaces the code of a 500."""
    status = _REJECT_STATUS.get(exc.code, 500)
    headers = {"Retry-After": "2"} if status == 503 else None
    code = internal_code if status == 500 and internal_code else exc.code
    param = exc.param
    if param is not None and field_names:
        param = field_names.get(param, param)
    return APIError(status, str(exc), param=param, code=code, headers=headers)


def unavailable(exc: EngineUnavailable) -> APIError:
    """503 for an engine that cannot take requests now (loading, restarting, no model)."""
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
    return APIError(503, str(exc), code=f"engine_{exc.state}", headers=headers)


def no_room(exc: NoRoom) -> APIError:
    """503 + Retry-After for a model that waited in vain for busy models to leave room."""
    return APIError(
        503, str(exc), code="model_no_room", headers={"Retry-After": str(exc.retry_after)}
    )


def engine_failed(message: str | None) -> APIError:
    """503 for a generation that failed after it started (the worker died, a library error)."""
    return APIError(
        503, message or "generation failed", code="engine_error", headers={"Retry-After": "2"}
    )
