"""The engine's typed states, status snapshot and the errors a request can meet.

Shared by the process handle, the supervisor and the server: states and reject codes are
``Literal`` types (the wire value is the string), never bare strings compared by hand.
Plain data: safe on any thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

from engine.models import ModelSpec
from engine.worker.messages import RejectCode

EngineState = Literal["stopped", "starting", "idle", "loading", "ready", "restarting", "error"]
"""The engine's state, as /health and the tray show it (the wire value is the string)."""

STOPPED: Final = "stopped"  # no worker (before start(), after close())
STARTING: Final = "starting"  # the worker process is starting
IDLE: Final = "idle"  # the worker runs, no chat model is loaded
LOADING: Final = "loading"  # a chat model is loading
READY: Final = "ready"  # a chat model takes requests
RESTARTING: Final = "restarting"  # the worker died or hung; a new one is on its way
ERROR: Final = "error"  # a model failed to load, or restarts are paused after crashes

HealthState = Literal[EngineState, "stalled"]
"""The state ``/health`` and ``/metrics`` report: the engine's, or ``stalled`` while a
worker that should answer (``ready``, ``idle``) has left a ping unanswered for longer than
``Settings.stall_seconds``. Never stored as a client's state: the supervision goes on as
the state says (requests still queue; the watchdog kills only after
``engine_watchdog_seconds``), this only tells the truth about it."""

STALLED: Final = "stalled"
ANSWERING: Final[frozenset[EngineState]] = frozenset({READY, IDLE})
"""States whose worker answers pings between steps (loading blocks its one thread)."""


class EngineUnavailable(Exception):
    """The engine cannot take requests now (loading, restarting, no model, error)."""

    def __init__(self, message: str, state: EngineState, retry_after: int | None) -> None:
        super().__init__(message)
        self.state = state
        self.retry_after = retry_after


class RequestFailed(Exception):
    """The worker refused a request (``code`` says why) or it ended with an error."""

    def __init__(self, code: RejectCode, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.param = param


@dataclass(frozen=True)
class EngineIncident:
    """The last time the worker died or hung: what happened and when (wall clock)."""

    message: str
    at: float  # seconds since the epoch
    exit_code: int | None = None

    def to_dict(self) -> dict[str, Any]:
        when = datetime.fromtimestamp(self.at, UTC).isoformat(timespec="seconds")
        return {"message": self.message, "exit_code": self.exit_code, "at": when}


@dataclass(frozen=True)
class CrashHistory:
    """What a model's workers went through: restarts and the last crash or hang. Kept by
    the scheduler when a model's worker leaves, so a reload of the same model carries it."""

    restarts: int = 0
    last_error: EngineIncident | None = None


@dataclass(frozen=True)
class EngineStatus:
    """A snapshot of the engine for /health, the tray and tests."""

    state: EngineState
    model: ModelSpec | None = None
    device: str | None = None
    backend: str | None = None
    context_length: int | None = None
    message: str | None = None
    worker_pid: int | None = None
    active_requests: int = 0
    completed: int = 0
    cancelled: int = 0
    failed: int = 0
    restarts: int = 0
    load_seconds: float | None = None
    chat_template: str | None = None  # the loaded model's, as its tokenizer reports it
    fim_tokens: tuple[str, str, str] | None = None  # its fill-in-the-middle tokens, if any
    last_error: EngineIncident | None = None  # the worker's last crash or hang
    # Why the last model went away on purpose ("idle", "keep_alive 0", ...): the engine is
    # healthy and loads it again on the next request. None once a model loads.
    unloaded: str | None = None
    # The CPU plugin properties the model was loaded with (explicit settings + self-tune).
    cpu_properties: dict[str, Any] | None = None
    # How long the worker has left a ping unanswered, once past ``Settings.stall_seconds``
    # while it should answer (None: it answers). Measured when the snapshot is taken.
    stalled_seconds: float | None = None
    # Why the last load refused the model's files (damaged, cut short): requests naming it
    # are a 422, not a 500. None after a load that worked, and while a load runs.
    damaged: str | None = None

    @property
    def health(self) -> HealthState:
        """The state as ``/health`` and ``/metrics`` report it (``stalled`` over ``ready``)."""
        return STALLED if self.stalled_seconds is not None else self.state

    def history(self) -> CrashHistory:
        return CrashHistory(self.restarts, self.last_error)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.health,
            "model": self.model.id if self.model else None,
            "device": self.device,
            "backend": self.backend,
            "context_length": self.context_length,
            "message": self.message,
            "worker_pid": self.worker_pid,
            "requests": {
                "active": self.active_requests,
                "completed": self.completed,
                "cancelled": self.cancelled,
                "failed": self.failed,
            },
            "restarts": self.restarts,
            "last_error": self.last_error.to_dict() if self.last_error else None,
            "load_seconds": self.load_seconds,
            "unloaded": self.unloaded,
            "cpu_properties": self.cpu_properties,
            "stalled_seconds": _rounded(self.stalled_seconds),
        }


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)


RequestOutcome = Literal["completed", "cancelled", "failed"]
"""How a finished request is counted in :class:`EngineStatus`."""


ModelLoadState = Literal["loading", "loaded", "unloaded"]
"""A model as ``/v1/models`` lists it: loading, loaded (takes requests), or not loaded."""


def load_state(state: EngineState) -> ModelLoadState:
    """The listing's word for an engine state."""
    if state in (STARTING, LOADING, RESTARTING):
        return "loading"
    return "loaded" if state == READY else "unloaded"


@dataclass(frozen=True)
class LoadedModel:
    """One model held by a worker, as ``/health``, ``/api/ps`` and the tray list it.

    ``memory_mb`` is the worker's measured resident memory once it has loaded, else the
    estimate from the model's files (``memory_estimated`` then says so).
    """

    id: str
    task: str  # "chat", "embeddings" or "rerank"
    state: EngineState
    device: str | None
    memory_mb: int | None
    memory_estimated: bool
    context_length: int | None
    expires_at: datetime | None
    active_requests: int
    worker_pid: int | None
    default: bool = False  # the model the tray and the chat window use
    stalled_seconds: float | None = None  # as EngineStatus.stalled_seconds

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "task": self.task,
            "state": STALLED if self.stalled_seconds is not None else self.state,
            "device": self.device,
            "memory_mb": self.memory_mb,
            "memory_estimated": self.memory_estimated,
            "context_length": self.context_length,
            "expires_at": self.expires_at.isoformat(timespec="seconds")
            if self.expires_at
            else None,
            "active_requests": self.active_requests,
            "worker_pid": self.worker_pid,
            "default": self.default,
            "stalled_seconds": _rounded(self.stalled_seconds),
        }


class NoRoom(Exception):
    """A model does not fit the memory budget and the models to evict stayed busy for the
    whole wait (their requests are never cancelled to make room): a 503 + Retry-After."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after
