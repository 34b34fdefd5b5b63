"""MiniMax-M2: ``<minimax:tool_call><invoke name="NAME"><parameter name="P">V</parameter>
</invoke></minimax:tool_call>``, several ``<invoke>`` per block; values typed by schema.

Wire form (as the template writes a call history; the reply's ``<think>`` block comes
first, opened by the generation prompt ``]~b]ai\n<think>\n``)::

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    </invoke>
    </minimax:tool_call>

Not thread-safe: one per request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from engine.parsing.tool_parsers.base import MarkupToolParser, RegionItem, Unparsed, split_blocks
from engine.parsing.tool_parsers.formats import ToolFormat
from engine.parsing.tool_parsers.grammar import (
    THINK,
    THINK_OPENED,
    CallGrammar,
    Const,
    Function,
    Json,
    Node,
    ParameterWriter,
    Repeat,
    Seq,
    Tag,
    Unconstrained,
    element_sequence,
    is_text_parameter,
    object_parameters,
    text_value,
)
from engine.parsing.tool_parsers.xml_params import XMLSpelling, open_call, read_call

SPELLING = XMLSpelling(
    re.compile(r'<parameter name="?(?P<name>[^">]+)"?>'), "</parameter>", "<parameter name="
)
BEGIN, END = "<minimax:tool_call>", "</minimax:tool_call>"
INVOKE, INVOKE_END = "<invoke name=", "</invoke>"


def invoke_items(
    parser: MarkupToolParser,
    region: str,
    final: bool,
    spelling: XMLSpelling,
    tags: tuple[str, str, str, str],
) -> tuple[list[RegionItem], int]:
    """``<invoke name="NAME">...</invoke>`` calls (MiniMax-M2, and DSML's spelling of it)."""
    head, tail, invoke, invoke_end = tags
    blocks, used = split_blocks(region, invoke, invoke_end, final)
    items: list[RegionItem] = []
    for block in blocks:
        name, found, body = block.body.partition(">")
        raw = head + invoke + block.body + (invoke_end if block.closed else "") + tail
        if not found:
            items.append(Unparsed(raw, "an invoke tag without its closing '>'"))
            continue
        items.append(read_call(name, body, spelling, parser._schemas, raw))
    return items, used


class InvokeToolParser(MarkupToolParser):
    """``<invoke name="NAME">`` calls in a block; a family sets its block and invoke tags
    and its parameter spelling (MiniMax-M2 here, DeepSeek V3.2's DSML)."""

    spelling: XMLSpelling = SPELLING
    invoke: tuple[str, str] = (INVOKE, INVOKE_END)

    def _split(self, region: str, final: bool) -> tuple[list[RegionItem], int]:
        tags = (self.begins[0], self.ends[0], *self.invoke)
        return invoke_items(self, region, final, self.spelling, tags)

    def _open_args(self, rest: str) -> tuple[str, str] | None:
        return open_call(rest, self.invoke, self.spelling, self._schemas, self.ends)


class MiniMaxM2ToolParser(InvokeToolParser):
    format = ToolFormat.MINIMAX_M2
    begins = (BEGIN,)
    ends = (END,)


def invoke_grammar(
    functions: Sequence[Function],
    single: bool,
    block: tuple[str, str],
    invoke: tuple[str, str],
    parameter: ParameterWriter,
) -> CallGrammar | Unconstrained:
    """One block (``block``: its opening and closing tag) of ``<invoke name="NAME">``
    calls (``invoke``: the tag up to the name, and its closing tag), each tag on its own
    line, one parameter element per parameter (declared order, optional ones may be left
    out) written by ``parameter``. The ``<think>`` block may come first (the rest of it,
    where the generation prompt opened it). The block's tag opens nothing but calls in
    these templates: lazy too. Shared by MiniMax-M2 and DeepSeek V3.2's DSML."""
    calls: list[Tag] = []
    for f in functions:
        parameters = object_parameters(f.parameters)
        if parameters is None:
            return Unconstrained.SCHEMA_NOTATION
        elements = [(parameter(key, schema), required) for key, schema, required in parameters]
        calls.append(Tag(f'{invoke[0]}"{f.name}">\n', element_sequence(elements), f"{invoke[1]}\n"))
    section = Tag(f"{block[0]}\n", Repeat(tuple(calls), "", single), block[1])
    return CallGrammar((section,), THINK, trigger=block[0], repeat=False, opened=THINK_OPENED)


def _parameter(key: str, schema: dict[str, object]) -> Node:
    """``<parameter name="P">V</parameter>``: text for a string, else JSON (``tojson``)."""
    head = f'<parameter name="{key}">'
    if is_text_parameter(schema):
        return text_value(head, schema, "</parameter>\n")
    return Seq((Const(head), Json(json.dumps(schema)), Const("</parameter>\n")))


def call_grammar(functions: Sequence[Function], single: bool) -> CallGrammar | Unconstrained:
    """MiniMax-M2's block of ``<invoke>`` calls (:func:`invoke_grammar`)."""
    return invoke_grammar(functions, single, (BEGIN, END), (INVOKE, INVOKE_END), _parameter)
