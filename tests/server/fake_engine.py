"""A scripted engine for unit tests of the request pipeline and the dialects.

It stands in for the engine worker ONLY in unit tests (tests/server/test_pipeline.py and
the dialects' unit tests): each submitted request plays the next scripted reply as the
worker's events (:class:`RequestAccepted` or :class:`RequestRejected`, :class:`TextDelta`
pieces, :class:`Finished`), so the pipeline's parsing, counting, error mapping and
cancellation can be checked exactly and fast. Everything about real inference (templating,
tokens, sampling, constrained decoding) is covered by the end-to-end tests on the tiny
models, which use the real :class:`engine.supervisor.client.EngineClient`.

Threading: used on one event loop; :meth:`FakeStream.cancel` may be called from any thread.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Literal

from engine.models import ModelSpec
from engine.supervisor.states import (
    ERROR,
    IDLE,
    LOADING,
    READY,
    EngineStatus,
    EngineUnavailable,
    LoadedModel,
    RequestFailed,
)
from engine.worker.messages import (
    Finished,
    FinishReason,
    GenerationRequest,
    RejectCode,
    RequestAccepted,
    TextDelta,
    TokenLogprob,
)

LoadOutcome = Literal["ready", "slow", "error"]


def fake_spec(model_id: str, task: str = "chat") -> ModelSpec:
    """A model the fake engine can 'load' (its files are never read)."""
    return ModelSpec(model_id, Path("/nonexistent") / model_id, "ir", 2048, task=task)


@dataclass(frozen=True)
class Scripted:
    """One reply as the worker would send it.

    ``pieces`` become one :class:`TextDelta` each (one token each, with a log-probability
    when the request asked); ``hold_after`` stops after that many pieces until the request
    is cancelled (then a ``cancelled`` :class:`Finished` follows).
    """

    pieces: tuple[str, ...] = ()
    finish: FinishReason = "stop"
    final_text: str = ""  # text held back to the end (a partial stop string)
    error: str | None = None  # finish "error" with this message
    reject: tuple[RejectCode, str, str | None] | None = None  # code, message, param
    prompt_tokens: int = 7
    opens_reasoning: bool = False
    hold_after: int | None = None
    stop_sequence: str | None = None  # the stop string the engine reports having matched


@dataclass
class FakeEngine:
    """Implements :class:`engine.server.pipeline.engine.EngineLike` from a script.

    It is also its one model's :class:`engine.server.pipeline.engine.ModelEngine` (what
    :meth:`acquire` and :meth:`running` return): the fake has one worker, whatever the
    model. It is never busy, so :meth:`unload` of the loaded model always succeeds.
    """

    model: ModelSpec | None = field(default_factory=lambda: fake_spec("fake-model"))
    chat_template: str | None = None
    fim_tokens: tuple[str, str, str] | None = None
    load_outcome: LoadOutcome = "ready"
    state: str = READY
    replies: deque[Scripted] = field(default_factory=deque)
    submitted: list[GenerationRequest] = field(default_factory=list)
    loads: list[ModelSpec] = field(default_factory=list)
    streams: list[FakeStream] = field(default_factory=list)
    keep_alive: float | None = None  # the last set_keep_alive

    def set_keep_alive(self, seconds: float) -> None:
        self.keep_alive = seconds

    def acquire(
        self, spec: ModelSpec, device: str | None, timeout: float | None = None
    ) -> FakeEngine:
        """One fake worker for every model: naming another model 'loads' it."""
        if self.model is None or self.model.id != spec.id or self.state == IDLE:
            self.load(spec, device)
        return self

    def running(self, model_id: str) -> FakeEngine | None:
        wanted = model_id.strip().lower()
        if self.state == READY and self.model is not None and self.model.id.lower() == wanted:
            return self
        return None

    def loaded(self) -> list[LoadedModel]:
        if self.model is None:
            return []
        return [
            LoadedModel(
                self.model.id,
                self.model.task,
                self.state,
                "CPU",
                None,
                True,
                2048,
                None,
                0,
                None,
                True,
            )
        ]

    def expires_at(self) -> datetime | None:
        return None

    def release(self, reason: str = "unloaded") -> bool:
        """The worker's own unload (:class:`ModelEngine`): ends whatever it holds."""
        self._drop()
        return True

    def script(self, *pieces: str, **options: object) -> None:
        """Queue the reply to the next request (see :class:`Scripted` for the options)."""
        self.replies.append(Scripted(pieces=pieces, **options))  # type: ignore[arg-type]

    def status(self) -> EngineStatus:
        return EngineStatus(
            state=self.state,  # type: ignore[arg-type]
            model=self.model,
            device="CPU",
            context_length=2048,
            chat_template=self.chat_template,
            fim_tokens=self.fim_tokens,
            message="could not load it: bad weights" if self.state == ERROR else None,
        )

    def load(self, spec: ModelSpec, device: str | None = None) -> None:
        self.loads.append(spec)
        self.model = spec
        self.state = {"ready": READY, "slow": LOADING, "error": ERROR}[self.load_outcome]

    def unload(self, model_id: str, reason: str = "unloaded") -> bool:
        """End ``model_id``'s worker (:class:`EngineLike`); False when it is not loaded."""
        wanted = model_id.strip().lower()
        if self.model is None or self.state == IDLE or self.model.id.lower() != wanted:
            return False
        self._drop()
        return True

    def _drop(self) -> None:
        self.model = None
        self.state = IDLE

    def submit(self, request: GenerationRequest) -> FakeStream:
        if self.state != READY:
            raise EngineUnavailable(f"the model is {self.state}; retry shortly", LOADING, 2)
        request_id = len(self.submitted) + 1
        request = replace(request, request_id=request_id)
        self.submitted.append(request)
        reply = self.replies.popleft() if self.replies else Scripted(("Hello",))
        stream = FakeStream(request, reply, asyncio.get_running_loop())
        self.streams.append(stream)
        return stream


class FakeStream:
    """Plays one :class:`Scripted` reply as a :class:`engine.supervisor.streams.RequestStream` would."""

    def __init__(
        self, request: GenerationRequest, reply: Scripted, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.request = request
        self.reply = reply
        self.accepted: RequestAccepted | None = None
        self.cancelled = False  # cancel() was called
        self.finished: Finished | None = None
        self._loop = loop
        self._wake = asyncio.Event()

    async def start(self) -> RequestAccepted:
        await asyncio.sleep(0)
        if self.reply.reject is not None:
            code, message, param = self.reply.reject
            raise RequestFailed(code, message, param)
        self.accepted = RequestAccepted(
            self.request.request_id,
            self.reply.prompt_tokens,
            self.request.max_tokens or 100,
            self.reply.opens_reasoning,
        )
        return self.accepted

    def cancel(self) -> None:
        if self.finished is None:
            self.cancelled = True
            self._loop.call_soon_threadsafe(self._wake.set)

    def __aiter__(self) -> AsyncIterator[TextDelta | Finished]:
        return self._play()

    async def _play(self) -> AsyncIterator[TextDelta | Finished]:
        if self.accepted is None:
            await self.start()
        rid, reply = self.request.request_id, self.reply
        sent = 0
        for piece in reply.pieces:
            if reply.hold_after is not None and sent == reply.hold_after:
                await self._wake.wait()
            await asyncio.sleep(0)
            if self.cancelled:
                break
            logprobs = (TokenLogprob(piece, -0.25),) if self.request.logprobs else ()
            sent += 1
            yield TextDelta(rid, piece, 1, logprobs)
        if self.cancelled:
            yield self._finish("cancelled", sent)
            return
        if reply.error is not None:
            yield self._finish("error", sent)
            return
        yield self._finish(reply.finish, sent, reply.final_text)

    def _finish(self, reason: FinishReason, tokens: int, text: str = "") -> Finished:
        self.finished = Finished(
            self.request.request_id,
            reason,
            self.reply.prompt_tokens,
            tokens,
            0.05 if tokens else None,
            0.1 * (tokens - 1) if tokens > 1 else None,
            text=text,
            error=self.reply.error if reason == "error" else None,
            stop_sequence=self.reply.stop_sequence if reason == "stop" else None,
        )
        return self.finished
