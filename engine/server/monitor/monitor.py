"""``RequestMonitor``: where each request is recorded once, whatever dialect it came in.

Two parts feed it. The HTTP middleware (:mod:`engine.server.monitor.middleware`) opens a
request when it arrives and closes it after the last byte of the answer (route, client,
status, duration, body). The pipeline (:class:`engine.server.pipeline.Pipeline`) tracks the
generation inside it (dialect, model, tokens, TTFT, tokens/s, queue wait, failure) through
a :class:`GenerationTracker`; it finds the request the middleware opened through a context
variable, and opens (and closes) one of its own when there is none: the desktop chat calls
the pipeline without HTTP. Closing logs the entry, counts it in the metrics and writes one
INFO line to the log file. Every text a client chose (the model name it asked for, its
``User-Agent``, the error its request got) is clipped here (:mod:`engine.echo`), so an
entry, its log line and its metrics labels are bounded in bytes whatever the request held.

Threading: requests are opened and tracked on the loop serving them (the server's, or the
desktop's asyncio thread); the log and the metrics may be read from any thread.
"""

from __future__ import annotations

import json
import logging
import time
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING

from engine.echo import HEADER_BYTES, MESSAGE_BYTES, clip, clip_optional
from engine.server.monitor.log import DEFAULT_CAPACITY, RequestLog
from engine.server.monitor.metrics import ServerMetrics
from engine.server.monitor.record import (
    CLIENT_GONE_STATUS,
    IN_PROCESS_ROUTE,
    OpenRequest,
    Replay,
    RequestEntry,
)
from engine.server.monitor.speculation import SpeculationStats
from engine.supervisor.states import EngineStatus

if TYPE_CHECKING:
    from collections.abc import Callable

    from engine.server.pipeline.events import Done

logger = logging.getLogger(__name__)

# The request being served in this context (an asyncio task and the tasks it starts). A
# ContextVar holds no shared object: each request's task sees only its own.
_current: ContextVar[OpenRequest | None] = ContextVar("sidelight_request", default=None)


def bind(request: OpenRequest) -> Token[OpenRequest | None]:
    """Make ``request`` the current one for the pipeline (the middleware calls this)."""
    return _current.set(request)


def unbind(token: Token[OpenRequest | None]) -> None:
    _current.reset(token)


def note_model(model_id: str | None = None, *, requested: str | None = None) -> None:
    """Record the model a request named (``requested``) or is served by, if a request is
    being served here. Model lookups call this, so requests refused before they reach the
    pipeline (an unknown model), embeddings and warm-ups name their model too."""
    request = _current.get()
    if request is None:
        return
    if requested is not None:
        request.requested_model = clip(requested)
    if model_id is not None:
        request.model = clip(model_id)


class RequestMonitor:
    """The request log and the Prometheus metrics, shared by a server and the desktop chat.

    Args:
        status: reads the engine's status (for the engine and model metrics).
        keep_bodies: keep request bodies in memory (for "copy as curl").
        capacity: how many finished requests the log keeps.
    """

    def __init__(
        self,
        status: Callable[[], EngineStatus],
        *,
        keep_bodies: bool = False,
        capacity: int = DEFAULT_CAPACITY,
    ) -> None:
        self.metrics = ServerMetrics(status)
        self.log = RequestLog(capacity)
        self.speculation = SpeculationStats()  # per model, for /health
        self._keep_bodies = keep_bodies

    @property
    def keep_bodies(self) -> bool:
        return self._keep_bodies

    def set_keep_bodies(self, keep: bool) -> None:
        """Turn keeping bodies on or off; off forgets the bodies kept so far."""
        self._keep_bodies = keep
        if not keep:
            self.log.drop_bodies()

    def open(
        self,
        *,
        dialect: str,
        method: str,
        route: str,
        user_agent: str | None = None,
        replay: Replay | None = None,
    ) -> OpenRequest:
        request = OpenRequest(
            dialect=dialect,
            method=method,
            route=route,
            user_agent=clip_optional(user_agent, HEADER_BYTES),
            replay=replay,
        )
        self.metrics.in_flight.inc()
        self.log.started(request)
        return request

    def close(
        self, request: OpenRequest, status: int, error: str | None = None, body: str | None = None
    ) -> RequestEntry:
        """End ``request`` with its HTTP ``status``: log it, count it, write its log line.

        ``error`` is the message of an error answer (the pipeline's own wins); ``body`` is
        kept only while keeping bodies is on.
        """
        if request.unfinished:  # a generation left behind: its client went away mid-answer
            request.cancelled = True
        if request.error is None and status >= 400:
            request.error = error
        request.error = clip_optional(request.error, MESSAGE_BYTES)
        outcome = request.outcome(status)
        kept = body if self._keep_bodies else None
        entry = self.log.finished(request, status, outcome, kept)
        self.metrics.observe(entry)
        self.metrics.in_flight.dec()
        logger.info("%s", log_line(entry))
        return entry

    def track(self, dialect: str, requested_model: str) -> GenerationTracker:
        """The tracker for one generation of the current request (the pipeline calls this;
        with no current request, e.g. the desktop chat, the tracker opens its own)."""
        request = _current.get()
        owned = request is None
        if request is None:
            request = self.open(dialect=dialect, method="", route=IN_PROCESS_ROUTE)
        request.dialect = dialect  # the pipeline knows it for sure; the path only suggests it
        request.requested_model = clip(requested_model)
        return GenerationTracker(self, request, owned)


class GenerationTracker:
    """What the pipeline reports about one generation, in order: ``resolved``,
    ``submitted``, ``accepted``, then one of ``finished``, ``failed``, ``cancelled``
    (the first end counts; later ones do nothing).

    Threading: the loop running the generation.
    """

    def __init__(self, monitor: RequestMonitor, request: OpenRequest, owned: bool) -> None:
        self._monitor = monitor
        self.request = request
        self._owned = owned  # opened here (no HTTP request around it): closed here too
        request.unfinished += 1
        self._submitted: float | None = None
        self._queued = False
        self._ended = False

    def resolved(self, model_id: str) -> None:
        self.request.model = clip(model_id)

    def submitted(self) -> None:
        self._submitted = time.monotonic()
        self._queued = True
        self._monitor.metrics.queued.inc()

    def accepted(self, prompt_tokens: int, cached_tokens: int = 0) -> None:
        self._unqueue()
        if self._submitted is not None:
            self.request.queue_seconds = time.monotonic() - self._submitted
        self.request.prompt_tokens = prompt_tokens
        self.request.cached_tokens = cached_tokens

    def generated(self, tokens: int) -> None:
        """Tokens generated so far (a running request shows them; a cancelled one keeps
        them)."""
        self.request.generated_tokens = tokens

    def finished(self, done: Done) -> None:
        if self._ended:
            return
        request = self.request
        request.prompt_tokens = done.usage.prompt_tokens
        request.cached_tokens = done.usage.cached_tokens
        request.generated_tokens = done.usage.completion_tokens
        request.ttft_seconds = done.timings.ttft_seconds
        request.tokens_per_second = done.tokens_per_second
        self._monitor.speculation.record(request.model, done)
        request.cancelled = request.cancelled or done.finish_reason == "cancelled"
        self._end(CLIENT_GONE_STATUS if request.cancelled else 200)

    def failed(self, status: int, message: str) -> None:
        if self._ended:
            return
        self.request.error_status, self.request.error = status, clip(message, MESSAGE_BYTES)
        self._end(status)

    def cancelled(self) -> None:
        """The consumer went away before the end (a client disconnected)."""
        if self._ended:
            return
        self.request.cancelled = True
        self._end(CLIENT_GONE_STATUS)

    def _unqueue(self) -> None:
        if self._queued:
            self._queued = False
            self._monitor.metrics.queued.dec()

    def _end(self, status: int) -> None:
        self._ended = True
        self.request.unfinished -= 1
        self._unqueue()
        if self._owned:
            self._monitor.close(self.request, status)


def log_line(entry: RequestEntry) -> str:
    """The log file's line for a finished request: the inspector's columns, one line."""
    cached = f" cached={entry.cached_tokens}" if entry.cached_tokens else ""
    parts = [
        f"request {entry.id}: {entry.dialect}",
        f"{entry.method} {entry.route}" if entry.method else entry.route,
        f"model={entry.model or entry.requested_model or '-'}",
        f"status={entry.status} {entry.outcome}",
        f"prompt={entry.prompt_tokens}{cached} generated={entry.generated_tokens}",
    ]
    if entry.ttft_seconds is not None:
        parts.append(f"ttft={entry.ttft_seconds:.3f}s")
    if entry.tokens_per_second:
        parts.append(f"{entry.tokens_per_second:.1f} tok/s")
    parts.append(f"duration={entry.duration_seconds or 0:.3f}s")
    if entry.user_agent:
        parts.append(f"client={json.dumps(entry.user_agent)}")  # quoted: one line, always
    if entry.error:
        parts.append(f"error={json.dumps(entry.error)}")
    return " ".join(parts)
