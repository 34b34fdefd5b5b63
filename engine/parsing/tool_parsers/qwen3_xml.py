"""Qwen3-Coder and Qwen3.5: XML calls inside ``<tool_call>`` blocks.

Wire form (the templates put each tag on its own line)::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

Parameter values are text, typed by the tool's JSON schema. A block holding Hermes JSON
instead is read as JSON (models trained on both slip). Not thread-safe: one per request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from engine.parsing.tool_parsers.base import (
    MarkupToolParser,
    RegionItem,
    Unparsed,
    json_list_items,
    split_blocks,
)
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
    ParameterWriter,
    Seq,
    Tag,
    Unconstrained,
    element_sequence,
    is_text_parameter,
    object_parameters,
    text_value,
)
from engine.parsing.tool_parsers.xml_params import XMLSpelling, open_call, read_call

SPELLING = XMLSpelling(re.compile(r"<parameter=(?P<name>[^>\n]+)>"), "</parameter>", "<parameter=")
FUNCTION, FUNCTION_END = "<function=", "</function>"


def function_items(
    parser: MarkupToolParser, region: str, final: bool, head: str, tail: str
) -> tuple[list[RegionItem], int]:
    """The ``<function=NAME>...</function>`` calls of a region (Qwen3-Coder, Seed-OSS)."""
    if final and FUNCTION not in region and region.strip().startswith(("{", "[")):
        return json_list_items(region, head + region + tail), len(region)
    blocks, used = split_blocks(region, FUNCTION, FUNCTION_END, final)
    items: list[RegionItem] = []
    for block in blocks:
        name, found, body = block.body.partition(">")
        raw = head + FUNCTION + block.body + (FUNCTION_END if block.closed else "") + tail
        if not found:
            items.append(Unparsed(raw, "a function tag without its closing '>'"))
            continue
        item = read_call(name, body, SPELLING, parser._schemas, raw)
        items.append(item)
    return items, used


class Qwen3XMLToolParser(MarkupToolParser):
    """``<tool_call><function=NAME><parameter=P>V</parameter></function></tool_call>``."""

    format = ToolFormat.QWEN3_XML
    begins = ("<tool_call>",)
    ends = ("</tool_call>",)

    def _split(self, region: str, final: bool) -> tuple[list[RegionItem], int]:
        return function_items(self, region, final, "<tool_call>", "</tool_call>")

    def _open_args(self, rest: str) -> tuple[str, str] | None:
        return open_call(rest, (FUNCTION, FUNCTION_END), SPELLING, self._schemas, self.ends)


def call_grammar(functions: Sequence[Function], single: bool) -> CallGrammar | Unconstrained:
    """``<tool_call>`` blocks of ``<function=NAME>`` with one ``<parameter=P>`` element per
    parameter (declared order, optional ones may be left out), each tag on its own line as
    the templates write them: string values as text up to ``</parameter>``, the rest as
    JSON. A ``<think>`` block (Qwen3.5) may come first. ``<tool_call>`` opens nothing but a
    call in these templates: lazy too."""
    del single  # each call is its own block: the repeat decides
    options = function_options(functions, _parameter)
    if isinstance(options, Unconstrained):
        return options
    call = Tag("<tool_call>\n", OneOf(options), "</tool_call>")
    return CallGrammar((call,), THINK, trigger="<tool_call>", separator="\n", opened=THINK_OPENED)


def function_options(
    functions: Sequence[Function], parameter: ParameterWriter
) -> tuple[Node, ...] | Unconstrained:
    """One ``<function=NAME>`` element per function, its parameters written by
    ``parameter`` (declared order, optional ones may be left out); shared by Qwen3-Coder /
    Qwen3.5 and Seed-OSS, which differ in the block around it and the parameter spelling."""
    options: list[Node] = []
    for f in functions:
        parameters = object_parameters(f.parameters)
        if parameters is None:
            return Unconstrained.SCHEMA_NOTATION
        elements = [(parameter(key, schema), required) for key, schema, required in parameters]
        body = (Const(f"{FUNCTION}{f.name}>\n"), element_sequence(elements))
        options.append(Seq((*body, Const(f"{FUNCTION_END}\n"))))
    return tuple(options)


def _parameter(key: str, schema: dict[str, object]) -> Node:
    head = f"<parameter={key}>\n"
    if is_text_parameter(schema):
        return text_value(head, schema, "\n</parameter>\n")
    return Seq((Const(head), Json(json.dumps(schema)), Const("\n</parameter>\n")))
