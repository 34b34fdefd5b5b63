"""Families whose calls are a JSON list of ``{"name", "arguments"}`` objects after a marker.

* Nemotron Nano v2: ``<TOOLCALL>[{"name": ..., "arguments": {...}}]</TOOLCALL>``
* Granite 3.x: ``<|tool_call|>[{"name": ..., "arguments": {...}}]`` to the end of the reply

Each list is read once its JSON closes. Not thread-safe: one per request.

A forced call in these families is one ``{"name", "arguments"}`` object in the list
(:data:`~engine.parsing.tool_parsers.constrain.CALL_SYNTAX`); :func:`lazy_grammar` holds the
whole list to the tools' schemas once the model writes the marker (``tool_choice: "auto"``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from engine.parsing.json_scan import JSONScanner
from engine.parsing.tool_parsers.base import MarkupToolParser, RegionItem, json_list_items
from engine.parsing.tool_parsers.formats import ToolFormat
from engine.parsing.tool_parsers.grammar import Function, Json, Tag, Triggered


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


# Each list family's marker and what closes the list ("": the reply ends after it).
LIST_TAGS: dict[ToolFormat, tuple[str, str]] = {
    ToolFormat.NEMOTRON: ("<TOOLCALL>", "</TOOLCALL>"),
    ToolFormat.GRANITE: ("<|tool_call|>", ""),
}


def list_schema(functions: Sequence[Function], single: bool) -> dict[str, object]:
    """The JSON schema of a list of calls to ``functions`` (one at most when ``single``)."""
    calls = [
        {
            "type": "object",
            "properties": {"name": {"const": f.name}, "arguments": f.parameters},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for f in functions
    ]
    schema: dict[str, object] = {
        "type": "array",
        "items": calls[0] if len(calls) == 1 else {"anyOf": calls},
        "minItems": 1,
    }
    if single:
        schema["maxItems"] = 1
    return schema


def lazy_grammar(fmt: ToolFormat, functions: Sequence[Function], single: bool) -> Triggered:
    """``tool_choice: "auto"``: free text until the family's marker, then a JSON list of calls
    valid for the tools (``parallel_tool_calls: false``: one call, and nothing after it).
    The marker opens nothing but calls in these templates. Granite's list has no closing tag
    (the reply ends after it): the tag's end is empty, which GenAI's structural tags take."""
    begin, end = LIST_TAGS[fmt]
    tag = Tag(begin, Json(json.dumps(list_schema(functions, single))), end)
    return Triggered((begin,), (tag,), single)
