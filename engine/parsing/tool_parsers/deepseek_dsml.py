"""DeepSeek V3.2's DSML calls (fullwidth bars, U+FF5C)::

    <｜DSML｜function_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls>

``string="true"`` keeps a value as text, ``string="false"`` reads it as JSON; without the
attribute the tool's schema types it. With thinking on, the generation prompt opens
``<think>`` and the reply closes it before the block (``</think>\n\n<｜DSML｜...``). Not
thread-safe: one per request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from engine.parsing.tool_parsers.formats import ToolFormat
from engine.parsing.tool_parsers.grammar import (
    CallGrammar,
    Const,
    Function,
    Json,
    Node,
    Seq,
    Unconstrained,
    is_text_parameter,
    text_value,
)
from engine.parsing.tool_parsers.minimax_m2 import InvokeToolParser, invoke_grammar
from engine.parsing.tool_parsers.xml_params import XMLSpelling

DSML = "｜DSML｜"
BEGIN, END = f"<{DSML}function_calls>", f"</{DSML}function_calls>"
INVOKE, INVOKE_END = f"<{DSML}invoke name=", f"</{DSML}invoke>"
SPELLING = XMLSpelling(
    re.compile(
        f'<{DSML}parameter name="(?P<name>[^"]+)"' r'(?:\s+string="(?P<string>true|false)")?\s*>'
    ),
    f"</{DSML}parameter>",
    f"<{DSML}parameter",
)


class DeepSeekDSMLToolParser(InvokeToolParser):
    format = ToolFormat.DEEPSEEK_DSML
    begins = (BEGIN,)
    ends = (END,)
    spelling = SPELLING
    invoke = (INVOKE, INVOKE_END)


def call_grammar(functions: Sequence[Function], single: bool) -> CallGrammar | Unconstrained:
    """A ``<｜DSML｜function_calls>`` block of ``<｜DSML｜invoke>`` calls
    (:func:`~engine.parsing.tool_parsers.minimax_m2.invoke_grammar`), each parameter as the
    template writes it: ``string="true"`` and the text for a string, ``string="false"`` and
    JSON for the rest."""
    return invoke_grammar(functions, single, (BEGIN, END), (INVOKE, INVOKE_END), _parameter)


def _parameter(key: str, schema: dict[str, object]) -> Node:
    head = f'<{DSML}parameter name="{key}" string='
    end = f"</{DSML}parameter>\n"
    if is_text_parameter(schema):
        return text_value(head + '"true">', schema, end)
    return Seq((Const(head + '"false">'), Json(json.dumps(schema)), Const(end)))
