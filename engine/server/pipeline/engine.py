"""The engine as the pipeline sees it, and the engine's failures as :class:`APIError`.

:class:`EngineLike` is the part of :class:`engine.supervisor.client.EngineClient` a generation needs;
the unit tests put a scripted fake engine behind it (``tests/server/fake_engine.py``), the
server and the desktop app the real client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from datetime import datetime
from typing import Protocol

from engine.models import ModelSpec
from engine.server.errors import APIError
from engine.supervisor.states import (
    EngineState,
    EngineStatus,
    EngineUnavailable,
    LoadedModel,
    NoRoom,
    RequestFailed,
)
from engine.worker.messages import Finished, GenerationRequest, RequestAccepted, TextDelta

# How each refusal code of the worker reaches a client.
_REJECT_STATUS: dict[str, int] = {
    "context_length_exceeded": 400,
    "invalid_request": 400,
    "fim_unsupported": 400,
    "no_model": 503,
    "engine_restarting": 503,
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


class EngineLike(Protocol):
    """What the pipeline asks of the engine: the scheduler
    (:class:`engine.supervisor.scheduler.Scheduler`, one worker per model) or one
    :class:`engine.supervisor.client.EngineClient`. ``status``, ``submit``, ``set_keep_alive``, ... speak
    of the default (or only) model; :meth:`acquire` and :meth:`running` give a model's own.
    """

    def acquire(
        self, spec: ModelSpec, device: str | None, timeout: float | None = None
    ) -> EngineLike:
        """The engine serving ``spec``, loading it when needed and waiting (bounded: by
        default ``Settings.load_wait_seconds``) for room and for the load; blocks (call it
        on a worker thread).

        Raises:
            NoRoom: the memory budget stayed held by busy models for the whole wait.
        """
        ...

    def running(self, model_id: str) -> EngineLike | None:
        """The engine of ``model_id`` when it is loaded and ready (never blocks)."""
        ...

    def loaded(self) -> list[LoadedModel]:
        """Every loaded (or loading) model."""
        ...

    def status(self) -> EngineStatus: ...

    def load(self, spec: ModelSpec, device: str | None = None) -> None: ...

    def wait_for(self, states: Collection[EngineState], timeout: float) -> EngineStatus:
        """Block until the state is one of ``states`` (called on a worker thread)."""
        ...

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


def request_failed(exc: RequestFailed, internal_code: str | None = None) -> APIError:
    """The HTTP error for a request the engine refused: a 4xx naming the field when the
    request was at fault; ``internal_code`` replaces the code of a 500."""
    status = _REJECT_STATUS.get(exc.code, 500)
    headers = {"Retry-After": "2"} if status == 503 else None
    code = internal_code if status == 500 and internal_code else exc.code
    return APIError(status, str(exc), param=exc.param, code=code, headers=headers)


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
