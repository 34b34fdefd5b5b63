"""Families whose calls are a JSON list of ``{"name", "arguments"}`` objects after a marker.

* Nemotron Nano v2: ``<TOOLCALL>[{"name": ..., "arguments": {...}}]</TOOLCALL>``
* Granite 3.x: ``<|tool_call|>[{"name": ..., "arguments": {...}}]`` to the end of the reply

Each list is read once its JSON closes. Not thread-safe: one per request.
"""

from __future__ import annotations

from engine.parsing.json_scan import JSONScanner
from engine.parsing.tool_parsers.base import MarkupToolParser, RegionItem, json_list_items
from engine.parsing.tool_parsers.formats import ToolFormat


class _JSONListParser(MarkupToolParser):
    def _split(self, region: str, final: bool) -> tuple[list[RegionItem], int]:
        items: list[RegionItem] = []
        pos = 0
        while True:
            start = pos
            while start < len(region) and region[start] in " \t\r\n,;":
                start += 1
            if start >= len(region):
                return items, len(region) if final else pos
            scanner = JSONScanner()
            end = scanner.feed(region[start:])
            if end is None:
                if not final:
                    return items, pos
                end = len(region) - start
            text = region[start : start + end]
            items.extend(json_list_items(text, self.begins[0] + text))
            pos = start + end


class NemotronToolParser(_JSONListParser):
    format = ToolFormat.NEMOTRON
    begins = ("<TOOLCALL>",)
    ends = ("</TOOLCALL>",)


class GraniteToolParser(_JSONListParser):
    format = ToolFormat.GRANITE
    begins = ("<|tool_call|>",)
    end_optional = True
