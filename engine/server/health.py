"""``GET /health``: the default model's state, every loaded model, and why models left.

It reads the engine through :class:`HealthSource` alone (the runtime's
:class:`engine.runtime.ServedEngine` has it), so the route never asks which engine it runs
on. 200 while the default model is ready, or unloaded on purpose (idle, ``keep_alive``:
the next request loads it again); 503 otherwise, with Retry-After while it is on its way.
``stalled`` (its worker left a ping unanswered past ``stall_seconds``: frozen, or one step
or command running that long) is a 503 too, and ``ready`` again once it answers.

Beyond loopback without the API key (:func:`engine.server.auth.health_status_only`) the
answer is ``{"status": ...}`` alone, with the same code, and it never revives a paused
engine: an anonymous probe neither learns the models, pids and errors nor starts a worker.
A trusted ``/health`` revives one at once (the watchdog does it anyway once the crash
window has passed).

Runs on the server's event loop; reviving a paused engine spawns a process, on a thread.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from engine.server.auth import health_status_only
from engine.server.monitor.speculation import SpeculationStats
from engine.supervisor.states import (
    ERROR,
    IDLE,
    LOADING,
    READY,
    RESTARTING,
    STARTING,
    EngineStatus,
    LoadedModel,
)
from engine.supervisor.unloads import UnloadEvent


class HealthSource(Protocol):
    """What ``/health`` reads: the default model's view and the scheduler's figures."""

    def status(self) -> EngineStatus:
        """The default model's status (the top-level fields)."""
        ...

    def revive(self) -> bool:
        """Start the default model's worker again after repeated crashes (blocks)."""
        ...

    def expires_at(self) -> datetime | None:
        """When the idle default model unloads (None: not loaded, or never)."""
        ...

    def loaded(self) -> list[LoadedModel]: ...

    def budget_mb(self) -> int: ...

    def waiting(self) -> list[str]: ...

    def recent_unloads(self) -> list[UnloadEvent]: ...


class RemoteHealth(Protocol):
    """The remote servers' last refreshes (:class:`engine.server.remote.RemoteCatalog`)."""

    def statuses(self) -> dict[str, Any]: ...


def health_routes(
    source: HealthSource, speculation: SpeculationStats, remotes: RemoteHealth | None = None
) -> list[Route]:
    """The ``/health`` route over ``source``; ``speculation``: accepted guesses per model;
    ``remotes``: each remote server and its last refresh (never its key). A remote that
    is down never makes ``/health`` fail: local serving does not depend on it."""

    async def health(request: Request) -> Response:
        if health_status_only(request.scope):
            status = source.status()
            return JSONResponse({"status": status.health}, *_code(status))
        if source.status().state == ERROR:
            # Restarts paused after crashes resume when someone asks (spawning blocks).
            await asyncio.to_thread(source.revive)
        status = source.status()
        body = status.to_dict()
        body["speculation"] = speculation.to_dict()  # per model, since start
        expires = source.expires_at() if status.state == READY else None
        body["expires_at"] = expires.isoformat(timespec="seconds") if expires else None
        # Every model a worker holds (the top-level fields speak of the default one).
        body["models"] = [model.to_dict() for model in source.loaded()]
        body["memory_budget_mb"] = source.budget_mb()
        body["waiting_for_room"] = source.waiting()
        # Why models went away lately (idle, keep_alive, evicted, pressure, crashed).
        body["unloaded_models"] = [event.to_dict() for event in source.recent_unloads()]
        if remotes is not None:
            body.update(remotes.statuses())
        return JSONResponse(body, *_code(status))

    return [Route("/health", health, methods=["GET"])]


def _code(status: EngineStatus) -> tuple[int, dict[str, str]]:
    """The HTTP status and headers ``status`` is answered with."""
    if status.health == READY or (status.health == IDLE and status.unloaded):
        # Unloaded on purpose (idle, keep_alive): healthy; the next request loads it.
        return 200, {}
    headers = {"Retry-After": "2"} if status.state in (LOADING, RESTARTING, STARTING) else {}
    return 503, headers
