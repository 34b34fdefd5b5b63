"""Reading XML-style calls: a function name and ``<parameter>`` elements, typed by schema.

Shared by Qwen3-Coder/Qwen3.5, Seed-OSS, MiniMax-M2 and DeepSeek V3.2 DSML, which differ only
in their tag spellings (:class:`XMLSpelling`). Pure functions; no threads.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from engine.parsing.tool_parsers.base import (
    ParsedCall,
    RegionItem,
    Unparsed,
    held_back,
    json_args_item,
)
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
    opener: str  # how every parameter tag begins (held back while streaming)


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
        if end < 0 and _reopened(matches, i):
            repaired = True  # a false start: the same tag opened again at once
            continue
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


def open_arguments(
    name: str, body: str, spelling: XMLSpelling, schemas: ToolSchemas | None, ends: tuple[str, ...]
) -> str | None:
    """The JSON arguments of a call still being written, as far as they are final.

    Complete parameters are typed as :func:`read_call` types them; the one being written
    streams only if the schema makes it a string (its text, escaped, holding back a partial
    closing tag and the newline the templates end a value with). Built exactly as
    :func:`read_call` writes the whole object, so each result extends the previous one.
    ``None`` until the first parameter tag is complete."""
    name = name.strip().strip('"').strip()
    matches = list(spelling.param.finditer(body))
    if not name or not matches:
        return None
    parts: list[str] = []
    for i, match in enumerate(matches):
        start = match.end()
        limit = matches[i + 1].start() if i + 1 < len(matches) else len(body)
        end = body.find(spelling.close, start, limit)
        key = json.dumps(match["name"], ensure_ascii=False) + ": "
        if end < 0 and _reopened(matches, i):
            continue  # as read_call: the false start is dropped
        if end >= 0 or i + 1 < len(matches):
            value = _trim(body[start : end if end >= 0 else limit])
            parts.append(key + json.dumps(_typed(name, match, value, schemas), ensure_ascii=False))
            continue
        text = body[start:]
        if not _is_string(name, match, schemas) or (text == "" and not parts):
            return "{" + ", ".join(parts) if parts else None
        opener = text.find(spelling.opener)
        if opener >= 0:
            text = text[:opener]  # a parameter tag being written: not this value's text
        text = text[: len(text) - held_back(text, (spelling.close, spelling.opener, *ends))]
        text = text.removeprefix("\n")  # the newline the templates open a value with
        if text.endswith("\n"):
            text = text[:-1]  # perhaps the newline before the closing tag
        quoted = json.dumps(text, ensure_ascii=False)[:-1]  # still open
        return "{" + ", ".join([*parts, key + quoted])
    return "{" + ", ".join(parts)


def _reopened(matches: list[re.Match[str]], i: int) -> bool:
    """Whether parameter ``i`` (unclosed) is followed at once by a tag of the same name: the
    model started the element again (seen under a forced grammar), and the later one counts,
    whole and streamed alike."""
    return i + 1 < len(matches) and matches[i + 1]["name"] == matches[i]["name"]


def _typed(name: str, match: re.Match[str], value: str, schemas: ToolSchemas | None) -> object:
    string = match.groupdict().get("string")
    if string == "true":
        return value
    types = {"object", "array", "number", "boolean", "null"} if string == "false" else set()
    return typed_value(value, types or parameter_types(schemas, name, match["name"]))[0]


def _is_string(name: str, match: re.Match[str], schemas: ToolSchemas | None) -> bool:
    string = match.groupdict().get("string")
    if string is not None:
        return string == "true"
    return parameter_types(schemas, name, match["name"]) == {"string"}


def open_call(
    rest: str,
    tags: tuple[str, str],
    spelling: XMLSpelling,
    schemas: ToolSchemas | None,
    ends: tuple[str, ...],
) -> tuple[str, str] | None:
    """The call being written at the start of ``rest`` (``tags``: its opening tag up to the
    name, and its closing tag): its name and :func:`open_arguments`, or ``None``."""
    open_tag, close_tag = tags
    body = rest.lstrip()
    if not body.startswith(open_tag):
        return None
    name, found, inner = body[len(open_tag) :].partition(">")
    if not found:
        return None
    cut = inner.find(close_tag)
    arguments = open_arguments(
        name, inner[:cut] if cut >= 0 else inner, spelling, schemas, (close_tag, *ends)
    )
    return None if arguments is None else (name.strip().strip('"').strip(), arguments)
