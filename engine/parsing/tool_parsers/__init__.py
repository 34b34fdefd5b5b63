"""Tool-call syntaxes, one module per family (vLLM's ``tool_parsers/`` layout).

* :mod:`.formats` — :class:`ToolFormat`, the typed name of each syntax
* :mod:`.events` — what a parser returns (content, call start, argument deltas, call end)
* :mod:`.base` — the parser protocol and :class:`MarkupToolParser`, the shared region reader
* one module per family (:mod:`.hermes`, :mod:`.qwen3_xml`, :mod:`.harmony`, ...)
* :mod:`.registry` — detection from the chat template and a parser per format
* :mod:`.repair` — tolerant JSON and the repaired-call counter; :mod:`.constrain` — forced calls
"""

from engine.parsing.tool_parsers.base import MarkupToolParser, ToolCallParser
from engine.parsing.tool_parsers.constrain import CALL_SYNTAX, CallSyntax, call_schema, call_syntax
from engine.parsing.tool_parsers.events import (
    ContentDelta,
    ParseEvent,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    new_call_id,
)
from engine.parsing.tool_parsers.formats import ToolFormat
from engine.parsing.tool_parsers.registry import (
    PARSERS,
    AutoToolParser,
    new_tool_call_parser,
    parse_tool_calls,
    tool_format_for_template,
)
from engine.parsing.tool_parsers.repair import loads_lenient, repaired_calls
from engine.parsing.tool_parsers.values import tool_schemas

__all__ = [
    "CALL_SYNTAX",
    "PARSERS",
    "AutoToolParser",
    "CallSyntax",
    "ContentDelta",
    "MarkupToolParser",
    "ParseEvent",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallEnd",
    "ToolCallParser",
    "ToolCallStart",
    "ToolFormat",
    "call_schema",
    "call_syntax",
    "loads_lenient",
    "new_call_id",
    "new_tool_call_parser",
    "parse_tool_calls",
    "repaired_calls",
    "tool_format_for_template",
    "tool_schemas",
]
