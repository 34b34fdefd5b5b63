"""What :func:`run` yields: one :class:`Started`, parsed reply events, one :class:`Done`.

The reply events are :mod:`engine.parsing`'s own: :class:`ReasoningText` (thinking),
:class:`ContentDelta` (answer text), :class:`ToolCallStart` / :class:`ToolCallDelta` /
:class:`ToolCallEnd` (a tool call, its JSON arguments streamed). A renderer maps each to
its dialect's chunks and ignores what its dialect has no place for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from engine.parsing import (
    ContentDelta,
    ReasoningText,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from engine.worker.messages import Speculation

# stop: the model ended (or a stop string matched); length: max_tokens or the context;
# tool_calls: it stopped after calling tools; cancelled: the consumer called
# Generation.cancel() and read on (the desktop's Stop; HTTP dialects never see it). An
# engine failure mid-stream is raised as APIError instead, after the events already yielded.
FinishReason = Literal["stop", "length", "tool_calls", "cancelled"]


@dataclass(frozen=True)
class Started:
    """The engine accepted the request: the model that serves it and the prompt's size."""

    model: str
    prompt_tokens: int
    cached_tokens: int = 0  # of prompt_tokens, found in the prefix cache (a remote: in Done)


@dataclass(frozen=True)
class Logprobs:
    """Log-probabilities of the tokens just streamed, in order (when requested)."""

    items: tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class Usage:
    """What a reply cost. ``cached_tokens`` of the ``prompt_tokens`` came from the prefix
    cache (the worker's count, engine.worker.prefix_ledger; a remote model's own
    ``prompt_tokens_details.cached_tokens``, 0 when it reports none)."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0


@dataclass(frozen=True)
class Timings:
    """What the chat window shows and llama.cpp-style ``timings`` report."""

    ttft_seconds: float | None
    decode_seconds: float | None
    # Speculative decoding (engine.worker.messages.Finished): steps that produced tokens,
    # guessed tokens the model accepted, and which kind of guessing ran ("off": none).
    decode_steps: int = 0
    accepted_tokens: int = 0
    speculation: Speculation = "off"


@dataclass(frozen=True)
class Done:
    """The last event: why the reply ended, what it cost, and (when a stop string ended it
    and the engine knows which) the stop sequence."""

    finish_reason: FinishReason
    usage: Usage
    timings: Timings
    stop_sequence: str | None = None

    @property
    def tokens_per_second(self) -> float | None:
        """The decoding rate (the first token counts as prefill, as in llama.cpp)."""
        decode_tokens = max(self.usage.completion_tokens - 1, 0)
        seconds = self.timings.decode_seconds
        return decode_tokens / seconds if seconds and decode_tokens else None


PipelineEvent = (
    Started
    | ReasoningText
    | ContentDelta
    | ToolCallStart
    | ToolCallDelta
    | ToolCallEnd
    | Logprobs
    | Done
)


@dataclass
class Reply:
    """A whole (non-streamed) generation, as :meth:`Pipeline.collect` returns it."""

    started: Started
    done: Done
    content: str = ""
    reasoning: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    logprobs: list[tuple[str, float]] = field(default_factory=list)
