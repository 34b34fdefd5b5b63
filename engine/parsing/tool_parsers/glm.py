"""GLM 4.5 / 4.6 / 4.7: ``<tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value>
</tool_call>`` (4.5/4.6 put newlines between the parts, 4.7 none).

Values are text for string parameters and JSON for the rest (the template writes them with
``tojson``), typed by the tool's schema. Not thread-safe: one per request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from engine.parsing.tool_parsers.base import MarkupToolParser, ParsedCall, RegionItem, Unparsed
from engine.parsing.tool_parsers.formats import ToolFormat
from engine.parsing.tool_parsers.grammar import (
    THINK,
    THINK_OPENED,
    CallGrammar,
    Const,
    Function,
    Json,
    Node,
    OneOf,
    Pattern,
    Seq,
    Tag,
    Unconstrained,
    element_sequence,
    is_text_parameter,
    object_parameters,
    text_value,
)
from engine.parsing.tool_parsers.values import arguments_json, parameter_types, typed_value

_PAIR = re.compile(
    r"<arg_key>(?P<key>.*?)</arg_key>\s*<arg_value>(?P<value>.*?)(?:</arg_value>|$)", re.DOTALL
)


class GLMToolParser(MarkupToolParser):
    format = ToolFormat.GLM
    begins = ("<tool_call>",)
    ends = ("</tool_call>",)

    def _split(self, region: str, final: bool) -> tuple[list[RegionItem], int]:
        if not final:
            return [], 0  # one call per block: read when it closes
        raw = "<tool_call>" + region + "</tool_call>"
        name, _, rest = region.partition("<arg_key>")
        name = name.strip()
        if not name or "\n" in name or "<" in name:
            return [Unparsed(raw, "a GLM call without a name")], len(region)
        arguments: dict[str, object] = {}
        repaired = False
        for match in _PAIR.finditer("<arg_key>" + rest if rest else ""):
            key = match["key"].strip()
            value, fixed = typed_value(match["value"], parameter_types(self._schemas, name, key))
            arguments[key] = value
            repaired = repaired or fixed
        return [ParsedCall(name, arguments_json(arguments), repaired)], len(region)


_NEWLINE = Pattern("\n?")  # GLM 4.5/4.6 put newlines between the parts, 4.7 none


def call_grammar(functions: Sequence[Function], single: bool) -> CallGrammar | Unconstrained:
    """``<tool_call>NAME`` then one key/value pair per parameter (declared order, optional
    ones may be left out): string values as text up to ``</arg_value>``, the rest as JSON,
    as the template writes them. The ``<think>`` block may come first. ``<tool_call>``
    opens nothing but a call in GLM's templates: lazy too."""
    del single  # each call is its own block: the repeat decides
    options: list[Node] = []
    for f in functions:
        parameters = object_parameters(f.parameters)
        if parameters is None:
            return Unconstrained.SCHEMA_NOTATION
        pairs = [(_pair(key, schema), required) for key, schema, required in parameters]
        options.append(Seq((Const(f.name), _NEWLINE, element_sequence(pairs))))
    call = Tag("<tool_call>", OneOf(tuple(options)), "</tool_call>")
    return CallGrammar((call,), THINK, trigger="<tool_call>", separator="\n", opened=THINK_OPENED)


def _pair(key: str, schema: dict[str, object]) -> Node:
    head = Const(f"<arg_key>{key}</arg_key>")
    if is_text_parameter(schema):
        value: Node = text_value("<arg_value>", schema, "</arg_value>")
    else:
        value = Seq((Const("<arg_value>"), Json(json.dumps(schema)), Const("</arg_value>")))
    return Seq((head, _NEWLINE, value, _NEWLINE))
