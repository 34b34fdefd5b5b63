"""The tool-call API under its old module name (it now lives in :mod:`engine.parsing.tool_parsers`).

Kept so imports written before the split keep working; new code imports
``engine.parsing`` or ``engine.parsing.tool_parsers``.
"""

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
    new_call_id,
    new_tool_call_parser,
    parse_tool_calls,
    tool_format_for_template,
)
from engine.parsing.tool_parsers.base import partial_suffix as _partial_suffix
from engine.parsing.tool_parsers.hermes import HermesToolCallParser
from engine.parsing.tool_parsers.llama3 import Llama3ToolCallParser
from engine.parsing.tool_parsers.mistral import MistralToolCallParser

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
    "HermesToolCallParser",
    "Llama3ToolCallParser",
    "MistralToolCallParser",
    "ParseEvent",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallEnd",
    "ToolCallParser",
    "ToolCallStart",
    "ToolFormat",
    "_partial_suffix",
    "call_schema",
    "new_call_id",
    "new_tool_call_parser",
    "parse_tool_calls",
    "tool_format_for_template",
]
