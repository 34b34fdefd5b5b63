"""DeepSeek V3.2's DSML calls (fullwidth bars, U+FF5C)::

    <｜DSML｜function_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls>

``string="true"`` keeps a value as text, ``string="false"`` reads it as JSON; without the
attribute the tool's schema types it. Not thread-safe: one per request.
"""

from __future__ import annotations

import re

from engine.parsing.tool_parsers.formats import ToolFormat
from engine.parsing.tool_parsers.minimax_m2 import InvokeToolParser
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
