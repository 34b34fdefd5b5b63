"""ByteDance Seed-OSS: ``<seed:tool_call><function=NAME><parameter=P>V</parameter>
</function></seed:tool_call>`` (the Qwen3-Coder element spelling inside Seed's own block).

Its reasoning, ``<seed:think>...</seed:think>``, is split by the reasoning registry. Not
thread-safe: one per request.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from engine.parsing.tool_parsers.base import MarkupToolParser, RegionItem
from engine.parsing.tool_parsers.formats import ToolFormat
from engine.parsing.tool_parsers.grammar import (
    CallGrammar,
    Const,
    Function,
    Json,
    Node,
    OneOf,
    Seq,
    Tag,
    Text,
    Unconstrained,
    is_text_parameter,
    text_value,
)
from engine.parsing.tool_parsers.qwen3_xml import (
    FUNCTION,
    FUNCTION_END,
    SPELLING,
    function_items,
    function_options,
)
from engine.parsing.tool_parsers.xml_params import open_call

BEGIN, END = "<seed:tool_call>", "</seed:tool_call>"
# Seed's reasoning block: the generation prompt (``<seed:bos>assistant\n``) does not open it.
SEED_THINK = Tag("<seed:think>", Text(), "</seed:think>")


class SeedOSSToolParser(MarkupToolParser):
    format = ToolFormat.SEED_OSS
    begins = (BEGIN,)
    ends = (END,)

    def _split(self, region: str, final: bool) -> tuple[list[RegionItem], int]:
        return function_items(self, region, final, BEGIN, END)

    def _open_args(self, rest: str) -> tuple[str, str] | None:
        return open_call(rest, (FUNCTION, FUNCTION_END), SPELLING, self._schemas, self.ends)


def call_grammar(functions: Sequence[Function], single: bool) -> CallGrammar | Unconstrained:
    """``<seed:tool_call>`` blocks of ``<function=NAME>`` with one ``<parameter=P>`` element
    per parameter (declared order, optional ones may be left out), as the template writes a
    call history: the value right after the tag, ``</parameter>`` and a newline after it.
    String values are text; the rest JSON (the template's ``| string`` would write Python's
    ``True``/``{'a': 1}``, which JSON-typed parsers misread; the parser reads JSON). The
    ``<seed:think>`` block may come first. ``<seed:tool_call>`` opens nothing but a call in
    Seed's template: lazy too."""
    del single  # each call is its own block: the repeat decides
    options = function_options(functions, _parameter)
    if isinstance(options, Unconstrained):
        return options
    call = Tag(f"{BEGIN}\n", OneOf(options), END)
    return CallGrammar((call,), SEED_THINK, trigger=BEGIN, separator="\n")


def _parameter(key: str, schema: dict[str, object]) -> Node:
    head = f"<parameter={key}>"
    if is_text_parameter(schema):
        return text_value(head, schema, "</parameter>\n")
    return Seq((Const(head), Json(json.dumps(schema)), Const("</parameter>\n")))
