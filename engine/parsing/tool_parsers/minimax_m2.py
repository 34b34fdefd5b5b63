"""MiniMax-M2: ``<minimax:tool_call><invoke name="NAME"><parameter name="P">V</parameter>
</invoke></minimax:tool_call>``, several ``<invoke>`` per block; values typed by schema.

Not thread-safe: one per request.
"""

from __future__ import annotations

import re

from engine.parsing.tool_parsers.base import MarkupToolParser, RegionItem, Unparsed, split_blocks
from engine.parsing.tool_parsers.formats import ToolFormat
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


class MiniMaxM2ToolParser(MarkupToolParser):
    format = ToolFormat.MINIMAX_M2
    begins = (BEGIN,)
    ends = (END,)

    def _split(self, region: str, final: bool) -> tuple[list[RegionItem], int]:
        return invoke_items(self, region, final, SPELLING, (BEGIN, END, INVOKE, INVOKE_END))

    def _open_args(self, rest: str) -> tuple[str, str] | None:
        return open_call(rest, (INVOKE, INVOKE_END), SPELLING, self._schemas, self.ends)
