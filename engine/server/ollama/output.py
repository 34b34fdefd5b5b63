"""Turn a model's text into Ollama's message parts: ``content``, ``thinking``, ``tool_calls``.

The parsing itself is :class:`engine.parsing.ReplyParser`, shared with ``/v1`` and the chat
window; this module decides what a request asks for (tool syntax, thinking, ``format``) and
shapes the events as Ollama does. Ollama sends tool calls whole, with object ``arguments``,
so a call appears in a piece only once it is complete; ``thinking`` streams as it comes.

Not thread-safe: one :class:`OutputParser` per request, used on the event loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from engine.parsing import (
    ContentDelta,
    ReasoningText,
    ReplyEvent,
    ReplyParser,
    ToolCallEnd,
    tool_format_for_template,
)
from engine.server.errors import APIError
from engine.server.model_info import ModelInfo
from engine.worker.messages import OutputConstraint

# Ollama's ``format: "json"`` is any JSON object, like OpenAI's ``json_object``.
_ANY_OBJECT = {"type": "object"}


@dataclass(frozen=True)
class Piece:
    """Part of an answer; empty fields are left out of the wire message."""

    content: str = ""
    thinking: str = ""
    tool_calls: tuple[dict[str, Any], ...] = ()

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.thinking:
            message["thinking"] = self.thinking
        if self.tool_calls:
            message["tool_calls"] = list(self.tool_calls)
        return message

    @staticmethod
    def join(pieces: list[Piece]) -> Piece:
        return Piece(
            "".join(p.content for p in pieces),
            "".join(p.thinking for p in pieces),
            tuple(c for p in pieces for c in p.tool_calls),
        )


class OutputParser:
    """What one request needs from the engine, and its reply as Ollama pieces.

    Args:
        info: the model (its template decides the tool syntax and whether it thinks).
        tools: Ollama/OpenAI tool definitions offered to the model, if any.
        think: Ollama's ``think``; ``False`` drops the thinking from the answer.
    """

    def __init__(
        self, info: ModelInfo, *, tools: list[dict[str, Any]] | None, think: bool | str | None
    ) -> None:
        self.info = info
        self.tools = [_function_tool(t) for t in tools] if tools else None
        self.think = think
        self._tool_format = tool_format_for_template(info.chat_template) if self.tools else None
        self._reply: ReplyParser | None = None
        # Plain text needs no parser (which would also trim a reply's leading space).
        self._plain = self._tool_format is None and not info.reasoning

    def template_kwargs(self) -> dict[str, Any] | None:
        """``enable_thinking`` for templates that can switch thinking on and off."""
        if self.think is None or not self.info.reasoning:
            return None
        return {"enable_thinking": self.think is not False}

    def begin(self, opens_reasoning: bool) -> None:
        """Start parsing; ``opens_reasoning``: the prompt already opened a ``<think>`` block."""
        self._reply = ReplyParser(
            tool_format=self._tool_format,
            starts_in_reasoning=opens_reasoning and self.info.reasoning,
        )

    def feed(self, text: str) -> list[Piece]:
        if not text:
            return []
        if self._plain:
            return [Piece(content=text)]
        return self._pieces(self._parser().feed(text))

    def finish(self) -> list[Piece]:
        return [] if self._plain else self._pieces(self._parser().finish())

    def _parser(self) -> ReplyParser:
        if self._reply is None:
            self.begin(False)
        assert self._reply is not None
        return self._reply

    def _pieces(self, events: list[ReplyEvent]) -> list[Piece]:
        pieces: list[Piece] = []
        for event in events:
            if isinstance(event, ContentDelta) and event.text:
                pieces.append(Piece(content=event.text))
            elif isinstance(event, ReasoningText) and event.text and self.think is not False:
                pieces.append(Piece(thinking=event.text))
            elif isinstance(event, ToolCallEnd):
                call = event.call
                function = {
                    "index": event.index,
                    "name": call.name,
                    "arguments": call.arguments_object(),
                }
                pieces.append(Piece(tool_calls=({"id": call.id, "function": function},)))
        return pieces


def constraint(fmt: str | dict[str, Any] | None) -> OutputConstraint | None:
    """Ollama's ``format`` (``"json"`` or a JSON schema) as constrained decoding."""
    if fmt is None:
        return None
    schema = _ANY_OBJECT if fmt == "json" else fmt
    return OutputConstraint(json.dumps(schema), param="format")


def output_parser(
    info: ModelInfo,
    name: str,
    *,
    tools: list[dict[str, Any]] | None,
    think: bool | str | None,
) -> OutputParser:
    """The parser for one request; refuses what the model cannot do, as Ollama does.

    Raises:
        APIError: 400 ``"name" does not support tools`` (or ``thinking``).
    """
    if think not in (None, False) and not info.reasoning:
        raise APIError(400, f'"{name}" does not support thinking')
    if tools and not info.tools:
        raise APIError(400, f'"{name}" does not support tools')
    return OutputParser(info, tools=tools, think=think)


def _function_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """Ollama tools are OpenAI's shape; a missing ``type`` means a function."""
    if not isinstance(tool.get("function"), dict):
        raise APIError(400, "tools: each tool needs a function object with a name")
    return {"type": tool.get("type") or "function", "function": tool["function"]}
