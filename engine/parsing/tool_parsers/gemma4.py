"""Gemma 4: ``<|tool_call>call:NAME{key:<|"|>text<|"|>,n:3}<tool_call|>``, one per block.

Keys are bare, strings sit between ``<|"|>`` tokens, numbers, booleans, lists and nested
objects are written as in JSON. The arguments are rewritten as JSON (strings quoted and
escaped, keys quoted). Reasoning (``<|channel>thought...<channel|>``) is the reasoning
registry's. Not thread-safe: one per request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from engine.parsing.tool_parsers.base import (
    MarkupToolParser,
    RegionItem,
    Unparsed,
    json_args_item,
)
from engine.parsing.tool_parsers.formats import ToolFormat
from engine.parsing.tool_parsers.grammar import (
    CallGrammar,
    Const,
    Function,
    Json,
    Node,
    OneOf,
    Seq,
    Tag,
    Text,
    Unconstrained,
    is_text_parameter,
    object_parameters,
)

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


_SCALARS = ("number", "integer", "boolean")


def call_grammar(functions: Sequence[Function], single: bool) -> CallGrammar | Unconstrained:
    """``<|tool_call>call:NAME{...}<tool_call|>`` with the arguments in Gemma's notation,
    keys in sorted order (the template's ``dictsort``): strings between ``<|"|>`` tokens,
    numbers and booleans as in JSON. Only flat schemas of such values: a nested object, an
    array or a union has no grammar in this notation yet (:data:`Unconstrained.SCHEMA_NOTATION`).
    The thought channel may come first. ``<|tool_call>`` opens nothing else: lazy too."""
    del single  # each call is its own block: the repeat decides
    options: list[Node] = []
    for f in functions:
        parameters = object_parameters(f.parameters)
        if parameters is None:
            return Unconstrained.SCHEMA_NOTATION
        values: list[tuple[Node, bool]] = []
        for key, schema, required in sorted(parameters):
            value = _value(schema)
            if value is None:
                return Unconstrained.SCHEMA_NOTATION
            values.append((Seq((Const(f"{key}:"), value)), required))
        options.append(Seq((Const(f"call:{f.name}{{"), _arguments(values), Const("}"))))
    call = Tag(BEGIN, OneOf(tuple(options)), END)
    reasoning = Tag("<|channel>thought", Text(), "<channel|>")
    return CallGrammar((call,), reasoning, trigger=BEGIN)


def _value(schema: dict[str, object]) -> Node | None:
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
        return OneOf(tuple(Const(f"{QUOTE}{v}{QUOTE}") for v in enum))
    if is_text_parameter(schema):
        return Tag(QUOTE, Text(), QUOTE)
    if schema.get("type") in _SCALARS and not {"enum", "const"} & set(schema):
        return Json(json.dumps({"type": schema["type"]}))
    return None


def _arguments(values: list[tuple[Node, bool]]) -> Node:
    """``k:v`` pairs joined by commas, the optional ones may be left out: the first pair
    written has no comma (one alternative per possible first pair, up to the first
    required one)."""

    def rest(start: int) -> list[Node]:
        parts: list[Node] = []
        for node, required in values[start:]:
            pair = Seq((Const(","), node))
            parts.append(pair if required else OneOf((pair, Const(""))))
        return parts

    firsts: list[Node] = []
    for k, (node, required) in enumerate(values):
        firsts.append(Seq((node, *rest(k + 1))))
        if required:
            break
    else:  # every pair optional: none at all is allowed too
        firsts.append(Const(""))
    return OneOf(tuple(firsts)) if firsts else Const("")
