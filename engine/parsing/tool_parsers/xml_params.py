"""Reading XML-style calls: a function name and ``<parameter>`` elements, typed by schema.

Shared by Qwen3-Coder/Qwen3.5, Seed-OSS, MiniMax-M2 and DeepSeek V3.2 DSML, which differ only
in their tag spellings (:class:`XMLSpelling`). Pure functions; no threads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.parsing.tool_parsers.base import ParsedCall, RegionItem, Unparsed, json_args_item
from engine.parsing.tool_parsers.values import (
    ToolSchemas,
    arguments_json,
    parameter_types,
    typed_value,
)


@dataclass(frozen=True)
class XMLSpelling:
    """How a family writes a parameter: ``param`` matches one opening tag (group ``name``,
    optional group ``string``: ``"true"`` keeps the value text, ``"false"`` reads JSON) and
    ``close`` ends its value."""

    param: re.Pattern[str]
    close: str


def read_call(
    name: str, body: str, spelling: XMLSpelling, schemas: ToolSchemas | None, raw: str
) -> RegionItem:
    """One call: ``name`` and the parameters in ``body`` as a JSON object."""
    name = name.strip().strip('"').strip()
    if not name:
        return Unparsed(raw, "a call without a name")
    if not spelling.param.search(body) and body.strip().startswith("{"):
        return json_args_item(name, body, raw=raw)  # JSON arguments where XML was expected
    arguments: dict[str, object] = {}
    repaired = False
    matches = list(spelling.param.finditer(body))
    for i, match in enumerate(matches):
        start = match.end()
        limit = matches[i + 1].start() if i + 1 < len(matches) else len(body)
        end = body.find(spelling.close, start, limit)
        if end < 0:
            end, repaired = limit, True  # a missing closing tag: the value runs to the next
        value = _trim(body[start:end])
        string = match.groupdict().get("string")
        if string == "true":
            arguments[match["name"]] = value
            continue
        types = {"object", "array", "number", "boolean", "null"} if string == "false" else set()
        typed, fixed = typed_value(value, types or parameter_types(schemas, name, match["name"]))
        arguments[match["name"]] = typed
        repaired = repaired or fixed
    return ParsedCall(name, arguments_json(arguments), repaired)


def _trim(value: str) -> str:
    """The value without the one newline the templates put on each side of it."""
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value
