"""The engine as the HTTP server and the chat window see it: the scheduler's models and the
default model's view, side by side.

:class:`ServedEngine` is plain delegation: model placement and the workers come from the
:class:`~engine.supervisor.scheduler.Scheduler`, the one-model status from
:class:`~engine.runtime.default_model.DefaultModel`. It implements the server's
:class:`engine.server.app.ServerEngine` protocol, so no server module needs to know which
object answers which question.

Threading: as the two objects it delegates to (any thread; ``acquire``, ``unload`` and
``revive`` block; the read hand-over methods run on the loop concerned).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from engine.models import ModelSpec
from engine.runtime.default_model import DefaultModel
from engine.supervisor.client import EngineClient
from engine.supervisor.scheduler import Scheduler
from engine.supervisor.states import EngineStatus, LoadedModel
from engine.supervisor.unloads import UnloadEvent
from engine.worker.messages import (
    Embedded,
    Reranked,
    Synthesize,
    Synthesized,
    Transcribe,
    Transcribed,
)


class ServedEngine:
    """The scheduler and the default model's view, as the server asks for them."""

    def __init__(self, scheduler: Scheduler, default: DefaultModel) -> None:
        self.scheduler = scheduler
        self.default = default

    # The default model's view.

    def status(self) -> EngineStatus:
        return self.default.status()

    def expires_at(self) -> datetime | None:
        return self.default.expires_at()

    def revive(self) -> bool:
        return self.default.revive()

    # The models, each in its own worker.

    def acquire(
        self, spec: ModelSpec, device: str | None, timeout: float | None = None
    ) -> EngineClient:
        return self.scheduler.acquire(spec, device, timeout)

    def running(self, model_id: str) -> EngineClient | None:
        return self.scheduler.running(model_id)

    def loaded(self) -> list[LoadedModel]:
        return self.scheduler.loaded()

    def unload(self, model_id: str, reason: str = "unloaded") -> bool:
        return self.scheduler.unload(model_id, reason)

    async def embed(
        self, spec: ModelSpec, texts: list[str], device: str | None = None, truncate: bool = False
    ) -> Embedded:
        return await self.scheduler.embed(spec, texts, device, truncate)

    async def rerank(
        self, spec: ModelSpec, query: str, documents: list[str], device: str | None = None
    ) -> Reranked:
        return await self.scheduler.rerank(spec, query, documents, device)

    async def transcribe(
        self, spec: ModelSpec, command: Callable[[int, str], Transcribe], device: str | None = None
    ) -> Transcribed:
        return await self.scheduler.transcribe(spec, command, device)

    async def synthesize(
        self, spec: ModelSpec, command: Callable[[int, str], Synthesize], device: str | None = None
    ) -> Synthesized:
        return await self.scheduler.synthesize(spec, command, device)

    def budget_mb(self) -> int:
        return self.scheduler.budget_mb()

    def waiting(self) -> list[str]:
        return self.scheduler.waiting()

    def recent_unloads(self) -> list[UnloadEvent]:
        return self.scheduler.recent_unloads()

    def read_on_loop(self) -> None:
        self.scheduler.read_on_loop()

    def read_on_thread(self) -> None:
        self.scheduler.read_on_thread()
