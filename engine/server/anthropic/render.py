"""The pipeline's events as Anthropic's streamed events, or as one message.

A stream is ``message_start``, ``ping``, then content blocks in order, each
``content_block_start``, its deltas (``thinking_delta``, ``text_delta`` or
``input_json_delta``) and ``content_block_stop``; then ``message_delta`` (stop reason and
usage) and ``message_stop``. A failure after the stream began is an ``error`` event. While
the engine is busy before the first token (a long prompt on a CPU), a ``ping`` goes out
every :data:`PING_SECONDS` so clients and proxies do not take the stream for dead.

Whitespace alone never opens a text block: a model's newlines between its thinking and a
tool call would otherwise make an empty-looking text block (the whole message leaves them
out the same way).

Runs on the server's event loop, one renderer per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any, Protocol, TypeVar

from engine.parsing import (
    ContentDelta,
    ReasoningText,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from engine.server.anthropic import protocol
from engine.server.errors import APIError
from engine.server.pipeline import Done, PipelineEvent, Reply, Started

PING_SECONDS = 10.0

T = TypeVar("T")


class GenerationLike(Protocol):
    """What a dialect reads from the pipeline's ``Generation`` (see
    :mod:`engine.server.pipeline`)."""

    @property
    def started(self) -> Started: ...

    def __aiter__(self) -> AsyncIterator[PipelineEvent]: ...

    def cancel(self) -> None: ...


def stop_reason(
    done: Done, max_tokens: int | None, called: bool
) -> tuple[protocol.StopReason, str | None]:
    """Anthropic's ``stop_reason`` and ``stop_sequence`` for how the generation ended.

    ``length`` before ``max_tokens`` means the context filled up first.
    """
    if done.finish_reason == "tool_calls" or (called and done.finish_reason == "stop"):
        return "tool_use", None
    if done.finish_reason == "length":
        if max_tokens is not None and done.usage.completion_tokens < max_tokens:
            return "model_context_window_exceeded", None
        return "max_tokens", None
    if done.stop_sequence is not None:
        return "stop_sequence", done.stop_sequence
    return "end_turn", None


def whole_message(
    reply: Reply, mid: str, max_tokens: int | None, *, omit_thinking: bool = False
) -> dict[str, Any]:
    """The non-streamed answer."""
    content: list[dict[str, Any]] = []
    if reply.reasoning:
        content.append(protocol.thinking_block("" if omit_thinking else reply.reasoning))
    if reply.content.strip():
        content.append(protocol.text_block(reply.content))
    content.extend(protocol.tool_use_block(c.id, c.name, tool_input(c)) for c in reply.calls)
    reason, sequence = stop_reason(reply.done, max_tokens, bool(reply.calls))
    done = reply.done.usage
    usage = protocol.usage(done.prompt_tokens, done.completion_tokens, done.cached_tokens)
    return protocol.message(mid, reply.started.model, content, reason, sequence, usage)


def tool_input(call: ToolCall) -> dict[str, Any]:
    """A call's arguments as the object ``tool_use.input`` must be (``{}`` if they are not)."""
    arguments = call.arguments_object()
    return arguments if isinstance(arguments, dict) else {}


async def stream_events(
    generation: GenerationLike,
    mid: str,
    max_tokens: int | None,
    *,
    omit_thinking: bool = False,
    ping_seconds: float = PING_SECONDS,
) -> AsyncIterator[str]:
    """Anthropic's event stream for a started generation; cancels it if left early."""
    started = generation.started
    usage = protocol.usage(started.prompt_tokens, 0, started.cached_tokens)
    start = protocol.message(mid, started.model, [], None, None, usage)
    yield protocol.event("message_start", {"type": "message_start", "message": start})
    yield _PING
    blocks = _Blocks(omit_thinking)
    try:
        async for item in _with_pings(generation, ping_seconds):
            if item is None:
                yield _PING
            elif isinstance(item, Done):
                for chunk in blocks.close():
                    yield chunk
                for chunk in _finish(item, max_tokens, blocks.called, started):
                    yield chunk
                return
            else:
                for chunk in blocks.feed(item):
                    yield chunk
    except APIError as exc:
        yield protocol.event("error", protocol.error_body(exc.status, exc.message))
    finally:
        generation.cancel()


_PING = protocol.event("ping", {"type": "ping"})
_DELTA_USAGE = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
)


def _finish(done: Done, max_tokens: int | None, called: bool, started: Started) -> list[str]:
    reason, sequence = stop_reason(done, max_tokens, called)
    # Done's count is the final one (a remote model's prompt is counted only there).
    # Anthropic's message_delta carries the cumulative usage, cache fields included.
    if done.usage.prompt_tokens:
        prompt, cached = done.usage.prompt_tokens, done.usage.cached_tokens
    else:
        prompt, cached = started.prompt_tokens, started.cached_tokens
    usage = protocol.usage(prompt, done.usage.completion_tokens, cached)
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": reason, "stop_sequence": sequence},
        "usage": {key: usage[key] for key in _DELTA_USAGE},
    }
    return [
        protocol.event("message_delta", delta),
        protocol.event("message_stop", {"type": "message_stop"}),
    ]


class _Blocks:
    """Numbers the content blocks and opens and closes them as the reply moves on."""

    def __init__(self, omit_thinking: bool) -> None:
        self._omit_thinking = omit_thinking
        self._count = 0
        self._open: str | None = None  # "thinking", "text" or "tool_use"
        self._held = ""  # whitespace not yet shown (see the module docstring)
        self.called = False

    def feed(self, event: PipelineEvent) -> list[str]:
        if isinstance(event, ReasoningText):
            out = self._ensure("thinking", protocol.thinking_block(""))
            if not self._omit_thinking and event.text:
                out.append(self._delta({"type": "thinking_delta", "thinking": event.text}))
            return out
        if isinstance(event, ContentDelta):
            return self._text(event.text)
        if isinstance(event, ToolCallStart):
            self.called = True
            self._held = ""
            block = protocol.tool_use_block(event.id, event.name, {})
            return [*self.close(), *self._start("tool_use", block)]
        if isinstance(event, ToolCallDelta) and event.arguments:
            return [self._delta({"type": "input_json_delta", "partial_json": event.arguments})]
        if isinstance(event, ToolCallEnd):
            return self.close()
        return []  # Started, Logprobs: nothing to show in this dialect

    def close(self) -> list[str]:
        if self._open is None:
            return []
        self._open = None
        return [
            protocol.event(
                "content_block_stop", {"type": "content_block_stop", "index": self._count - 1}
            )
        ]

    def _text(self, text: str) -> list[str]:
        if self._open != "text" and not text.strip():
            self._held += text
            return []
        text, self._held = self._held + text, ""
        out = self._ensure("text", protocol.text_block(""))
        out.append(self._delta({"type": "text_delta", "text": text}))
        return out

    def _ensure(self, kind: str, block: dict[str, Any]) -> list[str]:
        if self._open == kind:
            return []
        return [*self.close(), *self._start(kind, block)]

    def _start(self, kind: str, block: dict[str, Any]) -> list[str]:
        self._open = kind
        self._count += 1
        data = {"type": "content_block_start", "index": self._count - 1, "content_block": block}
        return [protocol.event("content_block_start", data)]

    def _delta(self, delta: dict[str, Any]) -> str:
        data = {"type": "content_block_delta", "index": self._count - 1, "delta": delta}
        return protocol.event("content_block_delta", data)


async def _with_pings(events: AsyncIterable[T], seconds: float) -> AsyncIterator[T | None]:
    """``events``' items, and ``None`` each time ``seconds`` pass without one.

    The next item is awaited in a task that is never cancelled by the wait, only when the
    caller leaves (so a timeout cannot break the generation mid-step).
    """
    iterator = events.__aiter__()
    pending: asyncio.Future[T] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(iterator.__anext__())
            done, _ = await asyncio.wait({pending}, timeout=seconds)
            if not done:
                yield None
                continue
            finished, pending = pending, None
            try:
                item = finished.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        if pending is not None:
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
