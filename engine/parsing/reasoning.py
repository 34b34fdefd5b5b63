"""Separate a reasoning model's ``<think>...</think>`` block from its answer, incrementally.

Qwen3, DeepSeek-R1, QwQ and their fine-tunes think first, inside ``<think>`` and
``</think>``, then answer. Clients want the two apart (OpenAI-style ``reasoning_content``,
Ollama's ``thinking``), and the thinking must never leak into ``content``.

Some templates open the block themselves (DeepSeek-R1 ends its generation prompt with
``<think>\\n``), so the model's text starts inside the block and only closes it: pass
``starts_in_reasoning=True`` then (the engine reports it per request).

Whitespace that only frames the block (the newline after ``<think>``, the blank line after
``</think>``) is dropped, so ``"<think>\\nA.\\n</think>\\n\\nB."`` gives reasoning ``"A."``
and content ``"B."``.

Other families mark the block differently (:class:`ReasoningFormat`): Ministral 3 and Magistral
``[THINK]...[/THINK]``, Seed-OSS ``<seed:think>...</seed:think>``, Gemma 4
``<|channel>thought...<channel|>``, and gpt-oss's harmony channels (``analysis`` is reasoning,
:mod:`engine.parsing.harmony_channels`). :func:`reasoning_format_for_template` picks one from
the chat template and :func:`engine.parsing.reasoning_registry.new_reasoning_parser` builds its splitter.

Not thread-safe: one splitter per request.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from engine.parsing.tool_parsers.base import partial_suffix as _partial_suffix

THINK_START = "<think>"
THINK_END = "</think>"


class ReasoningFormat(str, Enum):
    """How a family marks its reasoning."""

    THINK = "think"  # <think>...</think>: Qwen3, DeepSeek-R1, QwQ, Kimi K2-Thinking, GLM
    MISTRAL = "mistral"  # [THINK]...[/THINK]: Ministral 3, Magistral
    SEED_OSS = "seed_oss"  # <seed:think>...</seed:think>
    GEMMA4 = "gemma4"  # <|channel>thought\n...<channel|>
    HARMONY = "harmony"  # gpt-oss: the analysis channel

    def __str__(self) -> str:
        return self.value


# The block markers (start, end, a label the model writes right after start) per format.
TAGS: dict[ReasoningFormat, tuple[str, str, str]] = {
    ReasoningFormat.THINK: (THINK_START, THINK_END, ""),
    ReasoningFormat.MISTRAL: ("[THINK]", "[/THINK]", ""),
    ReasoningFormat.SEED_OSS: ("<seed:think>", "</seed:think>", ""),
    ReasoningFormat.GEMMA4: ("<|channel>", "<channel|>", "thought"),
}


@dataclass(frozen=True)
class ReasoningDelta:
    """What one piece of text adds to the reasoning and to the answer (either may be empty)."""

    reasoning: str = ""
    content: str = ""

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.content)


class ReasoningParser(Protocol):
    """What :class:`~engine.parsing.reply.ReplyParser` needs of a reasoning splitter."""

    @property
    def in_reasoning(self) -> bool: ...

    def feed(self, text: str) -> ReasoningDelta: ...

    def finish(self) -> ReasoningDelta: ...


_REASONING_MARKERS = (
    THINK_START,
    THINK_END,
    "reasoning_content",
    "enable_thinking",
    "[THINK]",
    "<seed:think>",
    "<|channel>",
    "<|channel|>analysis",
)


def template_supports_reasoning(template: str | None) -> bool:
    """Whether a chat template knows about thinking blocks (so replies should be split)."""
    text = template or ""
    return any(t in text for t in _REASONING_MARKERS)


def reasoning_format_for_template(template: str | None) -> ReasoningFormat:
    """The reasoning markup a chat template teaches (``<think>`` when it shows none)."""
    text = template or ""
    if "<|channel|>" in text and "<|message|>" in text:
        return ReasoningFormat.HARMONY
    if "<|channel>" in text:
        return ReasoningFormat.GEMMA4
    if "<seed:think>" in text:
        return ReasoningFormat.SEED_OSS
    if "[THINK]" in text:
        return ReasoningFormat.MISTRAL
    return ReasoningFormat.THINK


class ReasoningSplitter:
    """Splits streamed text into reasoning and content.

    Only a block at the start of the reply counts as reasoning; ``<think>`` later in an
    answer is content. A reply cut off inside the block (``max_tokens``) is all reasoning.
    """

    def __init__(
        self,
        *,
        starts_in_reasoning: bool = False,
        start: str = THINK_START,
        end: str = THINK_END,
        label: str = "",
    ) -> None:
        self._start, self._end = start, end
        self._label = label  # a word the model writes right after start (Gemma's "thought")
        self._label_pending = bool(label) and not starts_in_reasoning
        self._state = "reasoning" if starts_in_reasoning else "start"
        self._buffer = ""
        self._reasoning_started = False  # leading whitespace of the block is dropped
        self._content_started = False

    @property
    def in_reasoning(self) -> bool:
        return self._state == "reasoning"

    def feed(self, text: str) -> ReasoningDelta:
        """Add generated text; return what can be released now."""
        self._buffer += text
        reasoning, content = "", ""
        if self._state == "start":
            stripped = self._buffer.lstrip()
            if not stripped or (self._start.startswith(stripped) and stripped != self._start):
                return ReasoningDelta()
            if stripped.startswith(self._start):
                self._state = "reasoning"
                self._buffer = stripped[len(self._start) :]
            else:
                self._state = "content"
                self._content_started = True  # no block: the reply is kept as written
        if self._state == "reasoning" and self._label_pending:
            if len(self._buffer) < len(self._label) and self._label.startswith(self._buffer):
                return ReasoningDelta(reasoning, content)
            self._label_pending = False
            self._buffer = self._buffer.removeprefix(self._label)
        if self._state == "reasoning":
            at = self._buffer.find(self._end)
            if at >= 0:
                reasoning = self._reasoning(self._buffer[:at], final=True)
                self._buffer = self._buffer[at + len(self._end) :]
                self._state = "content"
            else:
                reasoning = self._reasoning_partial()
        if self._state == "content":
            content = self._content(self._buffer)
            self._buffer = ""
        return ReasoningDelta(reasoning, content)

    def finish(self) -> ReasoningDelta:
        """Generation ended: release what was held back."""
        buffer, self._buffer = self._buffer, ""
        if self._state == "reasoning":
            return ReasoningDelta(reasoning=self._reasoning(buffer, final=True))
        if self._state == "start":
            return ReasoningDelta(content=buffer)
        return ReasoningDelta(content=self._content(buffer))

    def _reasoning_partial(self) -> str:
        """Release reasoning except a possible partial end tag and trailing whitespace."""
        buffer = self._buffer
        keep = _partial_suffix(buffer, self._end)
        body = buffer[: len(buffer) - keep]
        releasable = body.rstrip()
        self._buffer = buffer[len(releasable) :]
        return self._reasoning(releasable, final=False)

    def _reasoning(self, text: str, *, final: bool) -> str:
        if not self._reasoning_started:
            text = text.lstrip()
            self._reasoning_started = bool(text)
        return text.rstrip() if final else text

    def _content(self, text: str) -> str:
        if not self._content_started:
            text = text.lstrip()
            self._content_started = bool(text)
        return text
