"""What the request inspector keeps about one request.

An :class:`OpenRequest` is filled while the request runs (by the HTTP middleware and the
pipeline); once it ends it becomes a frozen :class:`RequestEntry` in the log. Bodies live
only here, in memory, and only when the person turned "keep request bodies" on; secrets
(``Authorization``, ``x-api-key``) are never stored: :class:`Replay` keeps the name of the
header a key came in, never its value.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

Outcome = Literal["ok", "client_error", "server_error", "cancelled"]

# The route of requests that came from inside the app (the desktop chat), not over HTTP.
IN_PROCESS_ROUTE = "in-process"
# The route of a request no route matched (a 404).
UNMATCHED_ROUTE = "unmatched"
# Nginx's "client closed request": how a request ends whose client went away.
CLIENT_GONE_STATUS = 499


@dataclass(frozen=True)
class Replay:
    """What "copy as curl" needs besides the body; nothing secret.

    ``headers`` are the few that change an answer (content type, Anthropic's version);
    ``auth_header`` is ``"authorization"`` or ``"x-api-key"`` when the client sent a key.
    """

    method: str
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    auth_header: str | None = None


@dataclass(frozen=True)
class RequestEntry:
    """One request as the inspector, ``/api/sidelight/requests`` and the log file show it.

    ``id`` is 0 and ``outcome`` ``None`` while it runs; ids grow in the order requests
    finish, so a script polling with ``since`` misses none. ``model`` is the model that
    served it (``requested_model``: the name the client asked for).
    """

    id: int
    started_at: float  # wall clock, seconds since the epoch
    dialect: str
    method: str
    route: str
    user_agent: str | None
    requested_model: str | None
    model: str | None
    status: int | None
    outcome: Outcome | None
    prompt_tokens: int
    generated_tokens: int
    ttft_seconds: float | None
    tokens_per_second: float | None
    queue_seconds: float | None
    duration_seconds: float | None
    error: str | None
    body: str | None = None
    replay: Replay | None = None
    cached_tokens: int = 0  # of prompt_tokens, found in the prefix cache

    @property
    def running(self) -> bool:
        return self.outcome is None

    def to_dict(self, curl: str | None = None) -> dict[str, Any]:
        """The JSON form (``curl``: its "copy as curl" command, when the body was kept)."""
        started = datetime.fromtimestamp(self.started_at, UTC)
        return {
            "id": self.id,
            "time": started.isoformat(timespec="milliseconds"),
            "dialect": self.dialect,
            "method": self.method,
            "route": self.route,
            "user_agent": self.user_agent,
            "requested_model": self.requested_model,
            "model": self.model,
            "status": self.status,
            "outcome": self.outcome,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "generated_tokens": self.generated_tokens,
            "ttft_seconds": _round(self.ttft_seconds),
            "tokens_per_second": _round(self.tokens_per_second, 2),
            "queue_seconds": _round(self.queue_seconds),
            "duration_seconds": _round(self.duration_seconds),
            "error": self.error,
            "body": self.body,
            "curl": curl,
        }


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


class OpenRequest:
    """A request being served; becomes a :class:`RequestEntry` when it ends.

    Threading: written on the event loop that serves the request; :meth:`snapshot` may run
    on any thread (each field changes in one assignment, so a snapshot is at worst a
    moment old in one column).
    """

    def __init__(
        self,
        *,
        dialect: str,
        method: str,
        route: str,
        user_agent: str | None = None,
        replay: Replay | None = None,
    ) -> None:
        self.started_at = time.time()
        self.started = time.monotonic()
        self.dialect = dialect
        self.method = method
        self.route = route
        self.user_agent = user_agent
        self.replay = replay
        self.requested_model: str | None = None
        self.model: str | None = None
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.generated_tokens = 0
        self.ttft_seconds: float | None = None
        self.tokens_per_second: float | None = None
        self.queue_seconds: float | None = None
        self.error: str | None = None
        self.error_status: int | None = None  # a failure the pipeline saw (even mid-stream)
        self.cancelled = False  # the client went away, or the desktop's Stop
        self.unfinished = 0  # generations started and not ended (see GenerationTracker)

    def snapshot(
        self,
        *,
        id: int = 0,
        status: int | None = None,
        outcome: Outcome | None = None,
        body: str | None = None,
    ) -> RequestEntry:
        return RequestEntry(
            id=id,
            started_at=self.started_at,
            dialect=self.dialect,
            method=self.method,
            route=self.route,
            user_agent=self.user_agent,
            requested_model=self.requested_model,
            model=self.model,
            status=status,
            outcome=outcome,
            prompt_tokens=self.prompt_tokens,
            generated_tokens=self.generated_tokens,
            ttft_seconds=self.ttft_seconds,
            tokens_per_second=self.tokens_per_second,
            queue_seconds=self.queue_seconds,
            duration_seconds=time.monotonic() - self.started,
            error=self.error,
            body=body,
            replay=self.replay,
            cached_tokens=self.cached_tokens,
        )

    def outcome(self, status: int) -> Outcome:
        """How it ended, from the HTTP status and what the pipeline saw (a stream that
        failed after its 200 was sent is a server error)."""
        if self.error_status is None and (self.cancelled or status == CLIENT_GONE_STATUS):
            return "cancelled"
        worst = max(status, self.error_status or 0)
        if worst >= 500:
            return "server_error"
        if worst >= 400:
            return "client_error"
        return "ok"
