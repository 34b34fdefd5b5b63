"""What an Ollama request may ask of a model, and the pipeline's reply events as Ollama parts.

The parsing itself happens once, in :class:`engine.server.pipeline.Pipeline` (shared with
``/v1`` and the chat window); this module refuses what the model cannot do, as Ollama does,
and shapes the events as Ollama's ``content``, ``thinking`` and ``tool_calls``. Ollama sends
tool calls whole, with object ``arguments``, so a call appears in a piece only once it is
complete (:class:`ToolCallEnd`); ``thinking`` streams as it comes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.parsing import ContentDelta, ReasoningText, ToolCall, ToolCallEnd
from engine.server.errors import APIError
from engine.server.model_info import ModelInfo
from engine.server.pipeline import PipelineEvent, Reply

# Ollama's ``format: "json"`` is any JSON object, like OpenAI's ``json_object``.
_ANY_OBJECT = {"type": "object"}

Think = bool | str | None


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


def piece(event: PipelineEvent, think: Think) -> Piece | None:
    """The Ollama part for one reply event (``None``: nothing to send); ``think: false``
    leaves the thinking out."""
    if isinstance(event, ContentDelta) and event.text:
        return Piece(content=event.text)
    if isinstance(event, ReasoningText) and event.text and think is not False:
        return Piece(thinking=event.text)
    if isinstance(event, ToolCallEnd):
        return Piece(tool_calls=(tool_call(event.index, event.call),))
    return None


def whole(reply: Reply, think: Think) -> Piece:
    """A whole answer as one part."""
    thinking = reply.reasoning if think is not False else ""
    calls = tuple(tool_call(index, call) for index, call in enumerate(reply.calls))
    return Piece(reply.content, thinking, calls)


def tool_call(index: int, call: ToolCall) -> dict[str, Any]:
    function = {"index": index, "name": call.name, "arguments": call.arguments_object()}
    return {"id": call.id, "function": function}


def format_schema(fmt: str | dict[str, Any] | None) -> dict[str, Any] | None:
    """Ollama's ``format`` (``"json"`` or a JSON schema) as the schema the reply must match."""
    if fmt is None or isinstance(fmt, dict):
        return fmt
    return _ANY_OBJECT  # "json", the only string the protocol lets through


def check_request(info: ModelInfo, name: str, *, tools: bool, think: Think) -> None:
    """Refuse what the model cannot do, as Ollama does.

    Raises:
        APIError: 400 ``"name" does not support tools`` (or ``thinking``).
    """
    if think not in (None, False) and not info.reasoning:
        raise APIError(400, f'"{name}" does not support thinking')
    if tools and not info.tools:
        raise APIError(400, f'"{name}" does not support tools')


def thinking(info: ModelInfo, think: Think) -> bool | None:
    """``enable_thinking`` for templates that can switch thinking on and off."""
    if think is None or not info.reasoning:
        return None
    return think is not False


def function_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Ollama tools are OpenAI's shape; a missing ``type`` means a function."""
    out = []
    for tool in tools or []:
        if not isinstance(tool.get("function"), dict):
            raise APIError(400, "tools: each tool needs a function object with a name")
        out.append({"type": tool.get("type") or "function", "function": tool["function"]})
    return out
