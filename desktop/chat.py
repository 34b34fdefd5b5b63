"""A chat reply as the chat window runs it: through the HTTP API's own serving code.

:class:`ReplyJob` submits with :meth:`OpenAIServing.start` (the same validation, context checks
and error mapping ``/v1/chat/completions`` uses) and yields the engine's events. Nothing here
imports Qt; the window runs :meth:`ReplyJob.events` on the task manager's asyncio loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from engine.client import RequestStream
from engine.server.errors import APIError
from engine.server.openai.serving import OpenAIServing, timings
from engine.worker.messages import Finished, SamplingParams, TextDelta

ChatEvent = TextDelta | Finished


@dataclass(frozen=True)
class ChatOptions:
    """Generation controls for the chat window (``None``: the model's defaults)."""

    max_tokens: int | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)


@dataclass(frozen=True)
class ReplyStats:
    """What the status strip shows about one reply."""

    completion_tokens: int
    tokens_per_second: float | None
    ttft_seconds: float | None
    finish_reason: str

    @classmethod
    def from_finished(cls, result: Finished) -> ReplyStats:
        figures = timings(result)
        ttft_ms = figures["ttft_ms"]
        return cls(
            completion_tokens=result.completion_tokens,
            tokens_per_second=figures["predicted_per_second"],
            ttft_seconds=ttft_ms / 1000 if ttft_ms is not None else None,
            finish_reason=result.finish_reason,
        )


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


class ReplyJob:
    """One streamed reply.

    Threading: :meth:`events` runs on an asyncio loop (the engine's streams need one);
    :meth:`stop` may be called from any thread, before or during the stream.
    """

    def __init__(
        self, serving: OpenAIServing, messages: list[dict[str, Any]], options: ChatOptions
    ) -> None:
        self._serving = serving
        self._messages = messages
        self._options = options
        self._lock = threading.Lock()
        self._stream: RequestStream | None = None
        self._stop_requested = False

    async def events(self) -> AsyncIterator[ChatEvent]:
        """Yield the reply's text deltas and then its :class:`Finished` event.

        Raises:
            APIError: the engine refused the request (no model, loading, too long...).
        """
        stream = await self._serving.start(
            messages=self._messages,
            max_tokens=self._options.max_tokens,
            stop=(),
            sampling=self._options.sampling,
        )
        with self._lock:
            self._stream = stream
            stop_now = self._stop_requested
        if stop_now:
            stream.cancel()
        async for event in stream:
            yield event

    def stop(self) -> None:
        """Ask the engine to end the reply; a ``cancelled`` Finished event follows."""
        with self._lock:
            self._stop_requested = True
            stream = self._stream
        if stream is not None:
            stream.cancel()


def error_text(exc: BaseException) -> str:
    """The message a person sees in the chat for a failed reply."""
    if isinstance(exc, APIError):
        return exc.message
    return f"the reply failed: {exc}"
