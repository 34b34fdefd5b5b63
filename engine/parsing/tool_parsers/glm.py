"""GLM 4.5 / 4.6 / 4.7: ``<tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value>
</tool_call>`` (4.5/4.6 put newlines between the parts, 4.7 none).

Values are text for string parameters and JSON for the rest (the template writes them with
``tojson``), typed by the tool's schema. Not thread-safe: one per request.
"""

from __future__ import annotations

import re

from engine.parsing.tool_parsers.base import MarkupToolParser, ParsedCall, RegionItem, Unparsed
from engine.parsing.tool_parsers.formats import ToolFormat
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
