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
