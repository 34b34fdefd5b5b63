"""Mistral, Devstral, Ministral: ``[TOOL_CALLS]`` and then the calls, to the end of the reply.

Two wire forms: a JSON array (``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``,
Mistral 7B v0.3 / Nemo) and one ``[TOOL_CALLS]name[ARGS]{...}`` per call (v11+ tokenizers:
Mistral Small 3.2, Devstral, Ministral 3; ``[CALL_ID]id`` may sit between name and
``[ARGS]``). Each call is returned once its JSON closes. Not thread-safe: one per request.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.parsing.json_scan import JSONScanner
from engine.parsing.tool_parsers.base import (
    MarkupToolParser,
    RegionItem,
    held_back,
    json_args_item,
    json_list_items,
)
from engine.parsing.tool_parsers.formats import ToolFormat
from engine.parsing.tool_parsers.grammar import CallGrammar, Function, Json, Tag, Text

MARKER = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"


def writes_args(template: str) -> bool:
    """Whether ``template`` writes its calls ``[TOOL_CALLS]name[ARGS]{...}`` (v11+
    tokenizers: Mistral Small 3.2, Devstral, Ministral 3), not as a JSON array."""
    return ARGS in template


def call_grammar(functions: Sequence[Function], single: bool) -> CallGrammar:
    """The v11+ form, ``[TOOL_CALLS]NAME[ARGS]`` then the JSON arguments, one marker per
    call; a ``[THINK]`` block may come first (Ministral 3 Reasoning, Magistral). The JSON
    array form (v3) is :mod:`.constrain`'s ``CallSyntax``. ``[TOOL_CALLS]`` opens nothing
    else: lazy too."""
    del single  # each call has its own marker: the repeat decides
    calls = tuple(Tag(f"{MARKER}{f.name}{ARGS}", Json(f.schema_text), "") for f in functions)
    return CallGrammar(calls, Tag("[THINK]", Text(), "[/THINK]"), trigger=MARKER)


class MistralToolCallParser(MarkupToolParser):
    """``[TOOL_CALLS]`` then a JSON array of calls, or ``name[ARGS]{...}`` per call."""

    format = ToolFormat.MISTRAL
    begins = (MARKER,)
    marker = MARKER
    args_marker = ARGS

    def _split(self, region: str, final: bool) -> tuple[list[RegionItem], int]:
        items: list[RegionItem] = []
        pos = 0
        while True:
            start = _skip_separators(region, pos)
            if start >= len(region):
                return items, len(region) if final else pos
            if MARKER.startswith(region[start : start + len(MARKER)]) and not final:
                return items, pos  # perhaps the next call's marker: wait for it
            if region.startswith("[", start):
                scanner = JSONScanner()
                end = scanner.feed(region[start:])
                if end is None and not final:
                    return items, pos
                end = start + (end if end is not None else len(region) - start)
                items.extend(json_list_items(region[start:end], MARKER + region[start:end]))
                pos = end
                continue
            args_at = region.find(ARGS, start)
            if args_at < 0:
                if final:
                    items.append(json_args_item("", "", raw=region[start:]))
                    return items, len(region)
                return items, pos
            name = region[start:args_at].partition(CALL_ID)[0]
            scanner = JSONScanner()
            body_at = args_at + len(ARGS)
            end = scanner.feed(region[body_at:])
            if end is None:
                if not final:
                    return items, pos
                end = len(region) - body_at
            body = region[body_at : body_at + end]
            items.append(json_args_item(name, body, raw=MARKER + region[start : body_at + end]))
            pos = body_at + end

    def _open_args(self, rest: str) -> tuple[str, str] | None:
        start = _skip_separators(rest, 0)
        args_at = rest.find(ARGS, start)
        if args_at < 0 or rest.startswith("[", start):
            return None
        name = rest[start:args_at].partition(CALL_ID)[0]
        arguments = rest[args_at + len(ARGS) :]
        return name, arguments[: len(arguments) - held_back(arguments, (MARKER,))]


def _skip_separators(text: str, pos: int) -> int:
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,;":
            pos += 1
        if text.startswith(MARKER, pos):
            pos += len(MARKER)
            continue
        return pos
