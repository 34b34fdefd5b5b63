"""A chat reply as the chat window runs it: through the same pipeline as every HTTP API.

:class:`ReplyJob` sends the conversation through :class:`engine.server.pipeline.Pipeline`
(dialect ``desktop``: the same model resolution, context checks, error mapping and reply
parsing as ``/v1/chat/completions``), so a reasoning model's ``<think>`` block arrives as
thinking, never as raw tags, and tool calls as calls. Nothing here imports Qt; the window
runs :meth:`ReplyJob.events` on the task manager's asyncio loop.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from engine.parsing import ContentDelta, ReasoningText, ToolCall, ToolCallEnd
from engine.server.errors import APIError
from engine.server.images import ImageRef
from engine.server.pipeline import Done, GenerateRequest, Generation, Pipeline
from engine.worker.messages import SamplingParams

CONTEXT_EXCEEDED = "context_length_exceeded"  # the conversation is over the context
MESSAGE_TOO_LONG = "message_too_long"  # the last message alone is: dropping cannot help


@dataclass(frozen=True)
class ChatOptions:
    """Generation controls for the chat window (``None``: the model's defaults)."""

    max_tokens: int | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    thinking: bool | None = None  # switch a reasoning model's thinking on or off
    tools: tuple[dict[str, Any], ...] = ()  # OpenAI function tools the model may call
    context_limit: int | None = None  # the chat's own limit on prompt + reply tokens


@dataclass(frozen=True)
class ReplyStats:
    """What the status strip shows about one reply."""

    completion_tokens: int
    tokens_per_second: float | None
    ttft_seconds: float | None
    finish_reason: str
    # Speculative decoding: which kind ran ("off": none) and the guessed tokens accepted.
    speculation: str = "off"
    accepted_tokens: int = 0

    @classmethod
    def from_done(cls, done: Done) -> ReplyStats:
        tps = done.tokens_per_second
        ttft = done.timings.ttft_seconds
        return cls(
            completion_tokens=done.usage.completion_tokens,
            tokens_per_second=round(tps, 2) if tps else None,
            ttft_seconds=round(ttft, 4) if ttft else None,
            finish_reason=done.finish_reason,
            speculation=done.timings.speculation,
            accepted_tokens=done.timings.accepted_tokens,
        )


@dataclass(frozen=True)
class ReplyDelta:
    """New text of the reply: answer ``text`` and ``thinking`` (either may be empty), and
    the tokens the engine generated since the previous delta (for the live rate)."""

    text: str = ""
    thinking: str = ""
    tokens: int = 0


@dataclass(frozen=True)
class ReplyDone:
    """The reply ended (``stats.finish_reason`` ``cancelled`` after :meth:`ReplyJob.stop`):
    its whole answer, thinking and tool calls."""

    stats: ReplyStats
    text: str
    thinking: str
    calls: tuple[ToolCall, ...]


ChatEvent = ReplyDelta | ReplyDone


class LiveRate:
    """Tokens/s and time to first token while a reply streams (before the engine's figures).

    Threading: one thread (the GUI thread) feeds and reads it.
    """

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.first_token_at: float | None = None
        self.tokens = 0

    def add(self, tokens: int) -> None:
        if tokens and self.first_token_at is None:
            self.first_token_at = time.monotonic()
            tokens -= 1  # the first token is prefill; the rate counts decoding
        self.tokens += tokens

    @property
    def ttft_seconds(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.started

    @property
    def tokens_per_second(self) -> float | None:
        if self.first_token_at is None or self.tokens == 0:
            return None
        elapsed = time.monotonic() - self.first_token_at
        return self.tokens / elapsed if elapsed > 0 else None


class ThinkingClock:
    """How long a reply thought: from its first piece of thinking to the first piece of its
    answer, or to its end when no answer follows (a tool call, Stop).

    Threading: one thread (the GUI thread) feeds and reads it.
    """

    def __init__(self) -> None:
        self._started: float | None = None
        self._ended: float | None = None

    def add(self, delta: ReplyDelta) -> None:
        if delta.thinking and self._started is None:
            self._started = time.monotonic()
        if delta.text:
            self.stop()

    def stop(self) -> None:
        if self._started is not None and self._ended is None:
            self._ended = time.monotonic()

    @property
    def seconds(self) -> float | None:
        """The thinking time once thinking has ended; None before (or with no thinking)."""
        if self._started is None or self._ended is None:
            return None
        return self._ended - self._started


class ReplyJob:
    """One streamed reply.

    Threading: :meth:`events` runs on an asyncio loop (the engine's streams need one);
    :meth:`stop` may be called from any thread, before or during the stream.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        model: str | None,
        messages: list[dict[str, Any]],
        options: ChatOptions,
        images: tuple[ImageRef, ...] = (),
        *,
        model_context: int | None = None,
    ) -> None:
        """``images``: every image the messages name by index (``message["images"]``).
        ``model_context``: the model's context length, when known; a refusal for length
        then says whether the last message alone is over it (``message_too_long``: dropping
        older turns cannot help) or the conversation is (``context_length_exceeded``)."""
        self._pipeline = pipeline
        self._images = images
        self._model = model
        self._messages = messages
        self._options = options
        self._model_context = model_context
        self._lock = threading.Lock()
        self._generation: Generation | None = None
        self._stop_requested = False

    async def events(self) -> AsyncIterator[ChatEvent]:
        """Yield :class:`ReplyDelta` items, then one :class:`ReplyDone`.

        Raises:
            APIError: the request was refused (no model, loading, too long...) or the
                engine failed mid-reply.
        """
        if self._model is None:
            raise APIError(503, "no model is loaded", code="engine_idle")
        request = GenerateRequest(
            model=self._model,
            dialect="desktop",
            messages=self._messages,
            max_tokens=self._options.max_tokens,
            sampling=self._options.sampling,
            thinking=self._options.thinking,
            tools=list(self._options.tools),
            split_reasoning=True,
            images=self._images,
        )
        try:
            generation = await self._start(request)
        except APIError as exc:
            if exc.code == CONTEXT_EXCEEDED and await self._alone_too_long(request):
                raise APIError(
                    exc.status, exc.message, param=exc.param, code=MESSAGE_TOO_LONG
                ) from exc
            raise
        with self._lock:
            self._generation = generation
            stop_now = self._stop_requested
        if stop_now:
            generation.cancel()
        try:
            async for event in self._read(generation):
                yield event
        finally:
            generation.close()  # left early (the job was dropped): never "running" forever

    async def _read(self, generation: Generation) -> AsyncIterator[ChatEvent]:
        text: list[str] = []
        thinking: list[str] = []
        calls: list[ToolCall] = []
        counted = 0  # tokens already reported in a delta
        async for event in generation:
            if isinstance(event, ContentDelta | ReasoningText):
                tokens, counted = generation.tokens - counted, generation.tokens
                if isinstance(event, ContentDelta):
                    text.append(event.text)
                    yield ReplyDelta(text=event.text, tokens=tokens)
                else:
                    thinking.append(event.text)
                    yield ReplyDelta(thinking=event.text, tokens=tokens)
            elif isinstance(event, ToolCallEnd):
                calls.append(event.call)
            elif isinstance(event, Done):
                stats = ReplyStats.from_done(event)
                yield ReplyDone(stats, "".join(text), "".join(thinking), tuple(calls))

    async def _start(self, request: GenerateRequest) -> Generation:
        limit = self._options.context_limit
        if limit is not None:
            request = await self._within_limit(request, limit)
        return await self._pipeline.start(request)

    async def _alone_too_long(self, request: GenerateRequest) -> bool:
        """Whether the system prompt and the last message, without the turns before it,
        are over the context: then dropping older turns cannot make room."""
        messages = request.messages or []
        alone = [m for m in messages[:-1] if m.get("role") == "system"] + messages[-1:]
        if len(alone) == len(messages):
            return False  # nothing older to drop (the chat says so by itself)
        contexts = [c for c in (self._options.context_limit, self._model_context) if c]
        if not contexts:
            return False  # not known: dropping may help
        try:
            tokens = await count_tokens(
                self._pipeline, dataclasses.replace(request, messages=alone)
            )
        except APIError as exc:
            return exc.code == CONTEXT_EXCEEDED  # too big even to count
        return tokens >= min(contexts)

    async def _within_limit(self, request: GenerateRequest, limit: int) -> GenerateRequest:
        """Refuse a prompt over the chat's context limit (as the engine refuses one over the
        model's, so the same notice follows), else cap the reply to the room left."""
        prompt_tokens = await count_tokens(self._pipeline, request)
        room = limit - prompt_tokens
        if room <= 0:
            raise APIError(
                400,
                f"this chat's context limit is {limit} tokens and the conversation takes "
                f"{prompt_tokens}",
                code="context_length_exceeded",
            )
        wanted = request.max_tokens
        return dataclasses.replace(
            request, max_tokens=room if wanted is None else min(wanted, room)
        )

    def stop(self) -> None:
        """Ask the engine to end the reply; a ``cancelled`` :class:`ReplyDone` follows."""
        with self._lock:
            self._stop_requested = True
            generation = self._generation
        if generation is not None:
            generation.cancel()


async def count_tokens(pipeline: Pipeline, request: GenerateRequest) -> int:
    """The prompt's tokens as the model counts them (the engine's count path: templated and
    tokenized, nothing generated). It ends as a finished request in the monitor: an
    attachment's count once stayed "running" there for good (issue 28)."""
    return await pipeline.count(request)


async def count_text_tokens(pipeline: Pipeline, model: str | None, text: str) -> int:
    """Tokens of ``text`` alone as one user message (the chat template's few tokens around
    it included)."""
    if model is None:
        raise APIError(503, "no model is loaded", code="engine_idle")
    request = GenerateRequest(
        model=model, dialect="desktop", messages=[{"role": "user", "content": text}]
    )
    return await count_tokens(pipeline, request)


def error_text(exc: BaseException) -> str:
    """The message a person sees in the chat for a failed reply."""
    if isinstance(exc, APIError):
        return exc.message
    return f"the reply failed: {exc}"
