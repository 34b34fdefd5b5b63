"""One reply, parsed as it streams: reasoning first, then content and tool calls.

Combines a reasoning splitter (:func:`new_reasoning_parser`) and a :class:`ToolCallParser` the way every chat API
needs them: the thinking block is split off first, and only the answer after it is searched
for tool calls (a model may think about ``<tool_call>`` without making one).

Not thread-safe: one per request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.parsing.reasoning import ReasoningDelta, ReasoningFormat
from engine.parsing.reasoning_registry import new_reasoning_parser
from engine.parsing.tool_parsers import (
    ContentDelta,
    ParseEvent,
    ToolCall,
    ToolCallEnd,
    ToolFormat,
    new_tool_call_parser,
)


@dataclass(frozen=True)
class ReasoningText:
    """A piece of the model's thinking."""

    text: str


ReplyEvent = ReasoningText | ParseEvent


class ReplyParser:
    """Splits streamed text into :data:`ReplyEvent` items and keeps the whole reply.

    Args:
        tool_format: the tool-call syntax to parse (``None``: tools were not offered, so
            everything after the reasoning is content).
        starts_in_reasoning: the prompt opened a ``<think>`` block (see the engine's
            ``RequestAccepted.opens_reasoning``).
        max_calls: keep at most this many calls (1 for ``parallel_tool_calls: false``).
        reasoning_format: how the model marks its reasoning (``<think>`` by default).
        tools: the request's OpenAI tool definitions, which type XML-style parameters.
    """

    def __init__(
        self,
        *,
        tool_format: ToolFormat | str | None = None,
        starts_in_reasoning: bool = False,
        max_calls: int | None = None,
        reasoning_format: ReasoningFormat | str = ReasoningFormat.THINK,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        self._reasoning = new_reasoning_parser(
            reasoning_format, starts_in_reasoning=starts_in_reasoning
        )
        self._tools = new_tool_call_parser(tool_format, tools) if tool_format else None
        self._max_calls = max_calls
        self.reasoning = ""
        self.content = ""
        self.calls: list[ToolCall] = []

    def feed(self, text: str) -> list[ReplyEvent]:
        return self._route(self._reasoning.feed(text), final=False)

    def finish(self) -> list[ReplyEvent]:
        return self._route(self._reasoning.finish(), final=True)

    def _route(self, delta: ReasoningDelta, *, final: bool) -> list[ReplyEvent]:
        events: list[ReplyEvent] = []
        if delta.reasoning:
            self.reasoning += delta.reasoning
            events.append(ReasoningText(delta.reasoning))
        if self._tools is None:
            if delta.content:
                events.append(ContentDelta(delta.content))
        else:
            if delta.content:
                events.extend(self._tools.feed(delta.content))
            if final:
                events.extend(self._tools.finish())
        return self._keep(events)

    def _keep(self, events: list[ReplyEvent]) -> list[ReplyEvent]:
        kept: list[ReplyEvent] = []
        for event in events:
            index = getattr(event, "index", None)
            if index is not None and self._max_calls is not None and index >= self._max_calls:
                continue
            if isinstance(event, ContentDelta):
                self.content += event.text
            elif isinstance(event, ToolCallEnd):
                self.calls.append(event.call)
            kept.append(event)
        return kept
