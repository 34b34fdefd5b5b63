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
    Ebnf,
    Function,
    Tag,
    Text,
    Unconstrained,
    ebnf_literal,
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
_Q = ebnf_literal(QUOTE)
# A string's text: anything without <|"|> in it. Each unit leaves the text outside any part
# of the quote token ('<' starts it and occurs nowhere else in it); the tail may end inside.
_RULES = (
    f"gstr ::= {_Q} gunit* gtail {_Q}",
    'gunit ::= [^<] | "<"+ ([^|<] | "|" [^"<] | "|\\"" [^|<] | "|\\"|" [^><])',
    'gtail ::= ("<"+ ("|" ("\\"" "|"?)?)?)?',
    'gint ::= "-"? ("0" | [1-9] [0-9]{0,15})',
    'gnum ::= gint ("." [0-9]{1,16})? ([eE] [+-]? [0-9]{1,3})?',
)


def call_grammar(functions: Sequence[Function], single: bool) -> CallGrammar | Unconstrained:
    """``<|tool_call>call:NAME{...}<tool_call|>`` with the arguments in Gemma's notation,
    keys in sorted order (the template's ``dictsort``): strings between ``<|"|>`` tokens,
    numbers and booleans as in JSON. Only flat schemas of such values: a nested object, an
    array or a union has no grammar in this notation yet (:data:`Unconstrained.SCHEMA_NOTATION`).
    One EBNF, so optional keys (each needs a comma unless it is the first written) share
    their rules: linear in the parameters. The thought channel may come first.
    ``<|tool_call>`` opens nothing else: lazy too."""
    del single  # each call is its own block: the repeat decides
    rules: list[str] = []
    options: list[str] = []
    for i, f in enumerate(functions):
        parameters = object_parameters(f.parameters)
        if parameters is None:
            return Unconstrained.SCHEMA_NOTATION
        pairs: list[tuple[str, bool]] = []
        for key, schema, required in sorted(parameters):
            value = _value(schema)
            if value is None:
                return Unconstrained.SCHEMA_NOTATION
            pairs.append((f"{ebnf_literal(key + ':')} {value}", required))
        options.append(
            f'{ebnf_literal(f"call:{f.name}{{")} {_arguments(pairs, f"t{i}", rules)} "}}"'
        )
    grammar = "\n".join(["root ::= " + " | ".join(options), *rules, *_RULES]) + "\n"
    call = Tag(BEGIN, Ebnf(grammar), END)
    reasoning = Tag("<|channel>thought", Text(), "<channel|>")
    return CallGrammar((call,), reasoning, trigger=BEGIN)


def _value(schema: dict[str, object]) -> str | None:
    """The EBNF of one value in Gemma's notation, or None when it has none here."""
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
        return "(" + " | ".join(ebnf_literal(f"{QUOTE}{v}{QUOTE}") for v in enum) + ")"
    if is_text_parameter(schema):
        return "gstr"
    kind = schema.get("type")
    if kind in _SCALARS and not {"enum", "const"} & set(schema):
        return {"number": "gnum", "integer": "gint", "boolean": '("true" | "false")'}[str(kind)]
    return None


def _arguments(pairs: list[tuple[str, bool]], hint: str, rules: list[str]) -> str:
    """``k:v`` pairs joined by commas, the optional ones may be left out (the scheme of
    ``engine.worker.json_grammar``'s objects): ``rest_k`` is the pairs from k on after one
    was written; the first pair written is any up to the first required one."""
    rest = [""] * (len(pairs) + 1)
    for k in range(len(pairs) - 1, 0, -1):
        pair, required = pairs[k]
        step = f'"," {pair}' if required else f'("," {pair})?'
        name = f"{hint}_r{k}"
        rules.append(f"{name} ::= {step} {rest[k + 1]}".rstrip())
        rest[k] = name
    firsts: list[str] = []
    may_be_empty = True
    for k, (pair, required) in enumerate(pairs):
        firsts.append(f"{pair} {rest[k + 1]}".strip())
        if required:
            may_be_empty = False
            break
    if not firsts:
        return ""
    body = "(" + " | ".join(firsts) + ")"
    return body + "?" if may_be_empty else body
