"""Parsing model output: tool calls and reasoning blocks, incrementally.

Qt-free and HTTP-free, so every API surface (OpenAI ``/v1``, Ollama ``/api``) and the chat
window share one implementation:

* :func:`tool_format_for_template` / :func:`new_tool_call_parser` — a
  :class:`ToolCallParser` for the syntax the model's chat template uses, with
  ``feed(text) -> list[ParseEvent]`` and ``finish() -> list[ParseEvent]``.
* :class:`ReasoningSplitter` — ``feed(text) -> ReasoningDelta(reasoning, content)`` and
  ``finish()``.
* :class:`ReplyParser` — both together, as a chat reply needs them: reasoning split off
  first, then content and tool calls (``feed``/``finish`` return :data:`ReplyEvent` items).
* :func:`call_schema` / :data:`CALL_SYNTAX` — what a constrained (``tool_choice``) call
  must look like.

The syntaxes live one module per family in :mod:`engine.parsing.tool_parsers` (typed by
:class:`ToolFormat`); the reasoning markups in :mod:`engine.parsing.reasoning`
(:class:`ReasoningFormat`) and :mod:`engine.parsing.harmony_channels`.
"""

from engine.parsing.reasoning import (
    ReasoningDelta,
    ReasoningFormat,
    ReasoningParser,
    ReasoningSplitter,
    reasoning_format_for_template,
    template_supports_reasoning,
)
from engine.parsing.reasoning_registry import new_reasoning_parser
from engine.parsing.reply import ReasoningText, ReplyEvent, ReplyParser
from engine.parsing.tool_parsers import (
    CALL_SYNTAX,
    CallSyntax,
    ContentDelta,
    ParseEvent,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallParser,
    ToolCallStart,
    ToolFormat,
    call_schema,
    call_syntax,
    new_tool_call_parser,
    parse_tool_calls,
    repaired_calls,
    tool_format_for_template,
    tool_schemas,
)

HERMES, LLAMA3, MISTRAL = ToolFormat.HERMES, ToolFormat.LLAMA3, ToolFormat.MISTRAL
TOOL_FORMATS = tuple(ToolFormat)

__all__ = [
    "CALL_SYNTAX",
    "HERMES",
    "LLAMA3",
    "MISTRAL",
    "TOOL_FORMATS",
    "CallSyntax",
    "ContentDelta",
    "ParseEvent",
    "ReasoningDelta",
    "ReasoningFormat",
    "ReasoningParser",
    "ReasoningSplitter",
    "ReasoningText",
    "ReplyEvent",
    "ReplyParser",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallEnd",
    "ToolCallParser",
    "ToolCallStart",
    "ToolFormat",
    "call_schema",
    "call_syntax",
    "new_reasoning_parser",
    "new_tool_call_parser",
    "parse_tool_calls",
    "reasoning_format_for_template",
    "repaired_calls",
    "template_supports_reasoning",
    "tool_format_for_template",
    "tool_schemas",
]
