"""ByteDance Seed-OSS: ``<seed:tool_call><function=NAME><parameter=P>V</parameter>
</function></seed:tool_call>`` (the Qwen3-Coder element spelling inside Seed's own block).

Its reasoning, ``<seed:think>...</seed:think>``, is split by the reasoning registry. Not
thread-safe: one per request.
"""

from __future__ import annotations

from engine.parsing.tool_parsers.base import MarkupToolParser, RegionItem
from engine.parsing.tool_parsers.formats import ToolFormat
from engine.parsing.tool_parsers.qwen3_xml import FUNCTION, FUNCTION_END, SPELLING, function_items
from engine.parsing.tool_parsers.xml_params import open_call


class SeedOSSToolParser(MarkupToolParser):
    format = ToolFormat.SEED_OSS
    begins = ("<seed:tool_call>",)
    ends = ("</seed:tool_call>",)

    def _split(self, region: str, final: bool) -> tuple[list[RegionItem], int]:
        return function_items(self, region, final, "<seed:tool_call>", "</seed:tool_call>")

    def _open_args(self, rest: str) -> tuple[str, str] | None:
        return open_call(rest, (FUNCTION, FUNCTION_END), SPELLING, self._schemas, self.ends)
