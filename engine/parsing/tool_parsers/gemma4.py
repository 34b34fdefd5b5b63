"""Gemma 4: ``<|tool_call>call:NAME{key:<|"|>text<|"|>,n:3}<tool_call|>``, one per block.

Keys are bare, strings sit between ``<|"|>`` tokens, numbers, booleans, lists and nested
objects are written as in JSON. The arguments are rewritten as JSON (strings quoted and
escaped, keys quoted). Reasoning (``<|channel>thought...<channel|>``) is the reasoning
registry's. Not thread-safe: one per request.
"""

from __future__ import annotations

import json
import re

from engine.parsing.tool_parsers.base import (
    MarkupToolParser,
    RegionItem,
    Unparsed,
    json_args_item,
)
from engine.parsing.tool_parsers.formats import ToolFormat

BEGIN, END = "<|tool_call>", "<tool_call|>"
QUOTE = '<|"|>'
_KEY = re.compile(r"([{,]\s*)([A-Za-z_][\w.\-]*)\s*:")
_SLOT = "\x00{}\x00"


def gemma_to_json(text: str) -> str:
    """Gemma 4's argument notation as JSON text (strings first, so their text is left alone)."""
    strings: list[str] = []
    parts = text.split(QUOTE)
    out = []
    for i, part in enumerate(parts):
        if i % 2:  # inside a string
            strings.append(json.dumps(part, ensure_ascii=False))
            out.append(_SLOT.format(len(strings) - 1))
        else:
            out.append(part)
    skeleton = _KEY.sub(lambda m: f'{m[1]}"{m[2]}":', "".join(out))
    for i, quoted in enumerate(strings):
        skeleton = skeleton.replace(_SLOT.format(i), quoted, 1)
    return skeleton


class Gemma4ToolParser(MarkupToolParser):
    format = ToolFormat.GEMMA4
    begins = (BEGIN,)
    ends = (END,)

    def _split(self, region: str, final: bool) -> tuple[list[RegionItem], int]:
        if not final:
            return [], 0  # one call per block: read when it closes
        raw = BEGIN + region + END
        body = region.strip().removeprefix("call:")
        brace = body.find("{")
        if brace <= 0:
            return [Unparsed(raw, "a Gemma call without a name or arguments")], len(region)
        return [json_args_item(body[:brace], gemma_to_json(body[brace:]), raw=raw)], len(region)
