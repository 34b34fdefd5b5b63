"""Convert a JSON schema into a grammar for compact JSON (no free whitespace between tokens).

Why: GenAI 2026.4 compiles ``StructuredOutputConfig.json_schema`` with XGrammar's defaults,
which allow any whitespace between JSON tokens, and neither GenAI nor its structural tags
expose XGrammar's ``any_whitespace`` switch. A model that does not know the format (a small
or untrained one) then pads the JSON with spaces and newlines until ``max_tokens`` and the
client gets truncated, invalid JSON. The grammar built here admits compact JSON
(``{"a":1,"b":[true,null]}``, as OpenAI's strict mode writes it) with at most one space after
a ``,`` or ``:`` (``{"a": 1, "b": [true, null]}``, as ``json.dumps`` writes it, so a model
trained on that style is not pushed off it). A space never follows a space, so at every
point the model must soon take a step that moves the JSON forward. The grammar is in
XGrammar's EBNF dialect, passed to GenAI as ``StructuredOutputConfig(grammar=...)`` or as an
``EBNF`` structural tag.

Supported subset (what tool parameters and response formats use in practice, including the
schemas pydantic and the ``openai`` SDK produce):

* ``type`` as a name or a list; ``string``, ``number``, ``integer``, ``boolean``, ``null``;
* ``enum`` and ``const`` of any JSON values;
* ``object`` with ``properties`` (written in declared order, as XGrammar does), ``required``
  and ``additionalProperties`` (``false``, ``true`` or a schema). Like XGrammar's strict mode
  and OpenAI's strict schemas, an object with ``properties`` and no ``additionalProperties``
  allows no other keys; an object without ``properties`` (``{"type": "object"}``, the
  ``json_object`` format) is any JSON object;
* ``array`` with ``items``, ``minItems`` and ``maxItems``; ``string`` with ``minLength`` and
  ``maxLength``, or with a ``pattern`` in the common regex subset (:mod:`.json_pattern`);
* ``format`` on a string for ``date``, ``time``, ``date-time``, ``uuid``, ``ipv4``,
  ``hostname``, ``email`` and ``uri`` (:mod:`.json_formats`; the others fall back);
* ``minimum``, ``maximum``, ``exclusiveMinimum`` and ``exclusiveMaximum`` on integers, and
  on numbers when the bound is a whole number (:mod:`.json_numbers`), exactly;
* ``anyOf`` and ``oneOf`` as plain unions (``oneOf`` exclusivity is not enforced), a
  one-element ``allOf``, and local ``$ref`` into ``$defs`` / ``definitions`` (recursion
  allowed);
* annotations (``title``, ``description``, ``default``, ``examples``, ...) are ignored.

Numbers are bounded as well as whitespace: at most 16 digits before the decimal point, 16
after it and 3 in the exponent, the precision a JSON number has in practice (a double);
a larger integer belongs in a string, as JSON APIs do with 64-bit ids. Strings stay
unbounded unless the schema sets ``maxLength``.

Anything else (another ``format``, a fractional bound on a number, ``multipleOf``, a pattern with
lookaround or beside a length, ``prefixItems``, ``not``, ...) raises
:class:`UnsupportedSchema`. The caller then falls back to GenAI's own ``json_schema``,
which enforces those keywords but allows free whitespace, and compiles far slower on a
large vocabulary (a tool set that needed it took 15 s to compile on a 150k vocabulary, one
in this subset under half a second); for a union of tools only the tool outside the
subset falls back (``engine.worker.prepare``). A valid schema is always honoured and never
refused for being outside this subset; invalid schemas are refused as before.

Pure Python; used in the engine worker when it builds a request's ``GenerationConfig``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from engine.parsing.tool_parsers.grammar import ebnf_literal as _literal
from engine.worker.json_formats import format_grammar
from engine.worker.json_numbers import Unbounded, bounded_number, bounds_of
from engine.worker.json_pattern import UnsupportedPattern, pattern_grammar

__all__ = ["UnsupportedSchema", "compact_json_grammar"]

# Keywords that describe a schema without constraining the value.
_ANNOTATIONS = frozenset(
    {
        "$schema",
        "$id",
        "$comment",
        "$defs",
        "definitions",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "discriminator",  # OpenAPI/pydantic hint beside a union; the union itself constrains
        "strict",
    }
)
# Keywords this module enforces (the ones of other types are ignored, as JSON Schema says).
_HANDLED = frozenset(
    {
        "type",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "allOf",
        "$ref",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "pattern",
        "format",
    }
)
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
_MAX_DEPTH = 64

# Separators: one optional space after each, as ``json.dumps`` writes them by default, so a
# model trained on that style keeps it; never more, so whitespace cannot run on.
_COMMA = '"," " "?'
_COLON = '":" " "?'
# Compact JSON terminals. A string excludes control characters, as JSON requires. Numbers
# have at most 16 digits before the point and 16 after (a double's precision): otherwise a
# small model runs on digit after digit until max_tokens, as it does with whitespace.
_BASIC_RULES = {
    "json_value": (
        'json_object | json_array | json_string | json_number | "true" | "false" | "null"'
    ),
    "json_object": (
        f'"{{" (json_string {_COLON} json_value ({_COMMA} json_string {_COLON} json_value)*)? "}}"'
    ),
    "json_array": f'"[" (json_value ({_COMMA} json_value)*)? "]"',
    "json_string": '"\\"" json_char* "\\""',
    "json_char": (
        "[\\x20-\\x21\\x23-\\x5b\\x5d-\\U0000d7ff\\U0000e000-\\U0010ffff]"
        ' | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4})'
    ),
    "json_number": '"-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [+-]? [0-9]{1,3})?',
    "json_integer": '"-"? ("0" | [1-9] [0-9]{0,15})',
}
# Which basic rules each one refers to, so only what is used is written out.
_BASIC_DEPENDS = {
    "json_value": ("json_object", "json_array", "json_string", "json_number"),
    "json_object": ("json_string", "json_value"),
    "json_array": ("json_value",),
    "json_string": ("json_char",),
}


class UnsupportedSchema(ValueError):
    """The schema uses something this converter does not enforce (the message says what)."""


def compact_json_grammar(schema: Any) -> str:
    """An XGrammar EBNF grammar (start rule ``root``) for compact JSON valid against ``schema``.

    At most one space follows each ``,`` and ``:``; there is no other whitespace outside
    strings.

    Args:
        schema: a JSON schema, as parsed from JSON (a dict, or ``True`` for any value).

    Returns:
        The grammar text.

    Raises:
        UnsupportedSchema: the schema uses a keyword or form outside the supported subset.
    """
    return _Builder(schema).build()


def _json_literal(value: Any) -> str:
    """The compact JSON text of ``value`` as an EBNF literal."""
    return _literal(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def _alternatives(options: list[str]) -> str:
    unique = list(dict.fromkeys(options))
    return unique[0] if len(unique) == 1 else "(" + " | ".join(unique) + ")"


def _repeat(item: str, low: int, high: int | None) -> str:
    """``item`` repeated ``low`` to ``high`` (``None``: unbounded) times."""
    item = f"({item})" if " " in item else item
    if high is None:
        return f"{item}{{{low},}}" if low else f"{item}*"
    return f"{item}{{{low},{high}}}"


class _Builder:
    """Builds the rules for one schema; not reusable."""

    def __init__(self, root: Any) -> None:
        self._root = root
        self._rules: dict[str, str] = {}
        self._basics: set[str] = set()
        self._refs: dict[str, str] = {}
        self._names: set[str] = {"root"}

    def build(self) -> str:
        self._rules["root"] = self._value(self._root, "root", 0)
        lines = [f"root ::= {self._rules.pop('root')}"]
        lines += [f"{name} ::= {body}" for name, body in self._rules.items()]
        lines += [
            f"{name} ::= {_BASIC_RULES[name]}" for name in _BASIC_RULES if name in self._basics
        ]
        return "\n".join(lines) + "\n"

    # ---- rules and names -------------------------------------------------------------

    def _basic(self, name: str) -> str:
        if name not in self._basics:
            self._basics.add(name)
            for dependency in _BASIC_DEPENDS.get(name, ()):
                self._basic(dependency)
        return name

    def _new_name(self, hint: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", hint)[:40] or "r"
        name, n = base, 1
        while name in self._names or name in _BASIC_RULES:
            n += 1
            name = f"{base}_{n}"
        self._names.add(name)
        return name

    def _rule(self, hint: str, body: str) -> str:
        name = self._new_name(hint)
        self._rules[name] = body
        return name

    # ---- schemas -----------------------------------------------------------------------

    def _value(self, schema: Any, hint: str, depth: int) -> str:
        """An EBNF expression for one JSON value valid against ``schema``."""
        if depth > _MAX_DEPTH:
            raise UnsupportedSchema("the schema is nested too deeply")
        if schema is True:
            return self._basic("json_value")
        if not isinstance(schema, dict):
            raise UnsupportedSchema(f"{hint}: a schema must be an object or true")
        unknown = sorted(set(schema) - _ANNOTATIONS - _HANDLED)
        if unknown:
            raise UnsupportedSchema(f"{hint}: keyword {unknown[0]!r} is not supported")
        if "$ref" in schema:
            return self._ref(schema, hint, depth)
        if "const" in schema:
            return _json_literal(schema["const"])
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise UnsupportedSchema(f"{hint}: enum must be a non-empty list")
            return _alternatives([_json_literal(v) for v in values])
        for key in ("anyOf", "oneOf", "allOf"):
            if key in schema:
                return self._combined(schema, key, hint, depth)
        return self._typed(schema, hint, depth)

    def _ref(self, schema: dict[str, Any], hint: str, depth: int) -> str:
        if set(schema) - _ANNOTATIONS != {"$ref"}:
            raise UnsupportedSchema(f"{hint}: $ref beside other keywords is not supported")
        ref = schema["$ref"]
        if ref in self._refs:
            return self._refs[ref]
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise UnsupportedSchema(f"{hint}: only local $ref is supported")
        target: Any = self._root
        for token in [t for t in ref[1:].split("/") if t]:
            key = token.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or key not in target:
                raise UnsupportedSchema(f"{hint}: $ref {ref!r} does not resolve")
            target = target[key]
        # Named before its body is built, so a recursive schema refers back to it.
        name = self._new_name("ref_" + ref.rsplit("/", 1)[-1])
        self._refs[ref] = name
        self._rules[name] = self._value(target, name, depth + 1)
        return name

    def _combined(self, schema: dict[str, Any], key: str, hint: str, depth: int) -> str:
        options = schema[key]
        if set(schema) - _ANNOTATIONS != {key}:
            raise UnsupportedSchema(f"{hint}: {key} beside other keywords is not supported")
        if not isinstance(options, list) or not options:
            raise UnsupportedSchema(f"{hint}: {key} must be a non-empty list")
        if key == "allOf":
            if len(options) != 1:
                raise UnsupportedSchema(f"{hint}: allOf with several schemas is not supported")
            return self._value(options[0], hint, depth + 1)
        return _alternatives(
            [self._value(option, f"{hint}_{i}", depth + 1) for i, option in enumerate(options)]
        )

    def _typed(self, schema: dict[str, Any], hint: str, depth: int) -> str:
        kinds = schema.get("type")
        if kinds is None:
            if "properties" in schema or "additionalProperties" in schema:
                kinds = "object"
            elif "items" in schema:
                kinds = "array"
            else:
                return self._basic("json_value")
        names = kinds if isinstance(kinds, list) else [kinds]
        if not names or any(kind not in _TYPES for kind in names):
            raise UnsupportedSchema(f"{hint}: unknown type {kinds!r}")
        return _alternatives([self._one_type(schema, kind, hint, depth) for kind in names])

    def _one_type(self, schema: dict[str, Any], kind: str, hint: str, depth: int) -> str:
        if kind == "object":
            return self._object(schema, hint, depth)
        if kind == "array":
            return self._array(schema, hint, depth)
        if kind == "string":
            return self._string(schema, hint)
        if kind in ("number", "integer"):
            return self._number(schema, kind, hint)
        return '("true" | "false")' if kind == "boolean" else '"null"'

    def _number(self, schema: dict[str, Any], kind: str, hint: str) -> str:
        if not any(key in schema for key in _BOUNDS):
            return self._basic(f"json_{kind}")
        integer = kind == "integer"
        try:
            lower, upper = bounds_of(schema, integer)
            return self._rule(f"{hint}_{kind}", bounded_number(lower, upper, integer))
        except Unbounded as exc:
            raise UnsupportedSchema(f"{hint}: {exc}") from exc

    def _string(self, schema: dict[str, Any], hint: str) -> str:
        low = _count(schema, "minLength", hint) or 0
        high = _count(schema, "maxLength", hint)
        if "format" in schema:
            body = format_grammar(str(schema["format"]))
            if body is None:
                raise UnsupportedSchema(f"{hint}: format {schema['format']!r} is not supported")
            if low or high is not None or "pattern" in schema:
                raise UnsupportedSchema(f"{hint}: format beside a length or pattern")
            return self._rule(f"{hint}_format", f'"\\"" {body} "\\""')
        if "pattern" in schema:
            pattern = schema["pattern"]
            if not isinstance(pattern, str):
                raise UnsupportedSchema(f"{hint}: pattern must be a string")
            if low or high is not None:  # both at once: an intersection EBNF cannot write
                raise UnsupportedSchema(f"{hint}: pattern beside a length is not supported")
            try:
                body = pattern_grammar(pattern, self._basic("json_char"))
            except UnsupportedPattern as exc:
                raise UnsupportedSchema(f"{hint}: pattern {pattern!r}: {exc}") from exc
            return self._rule(f"{hint}_pattern", body)
        if low == 0 and high is None:
            return self._basic("json_string")
        self._basic("json_char")
        return self._rule(f"{hint}_string", f'"\\"" {_repeat("json_char", low, high)} "\\""')

    def _array(self, schema: dict[str, Any], hint: str, depth: int) -> str:
        items = schema.get("items", True)
        if not isinstance(items, bool | dict):
            raise UnsupportedSchema(
                f"{hint}: items must be a schema (prefixItems is not supported)"
            )
        low = _count(schema, "minItems", hint) or 0
        high = _count(schema, "maxItems", hint)
        if items is False or high == 0:
            return '"[" "]"'
        item = self._value(items, f"{hint}_item", depth + 1)
        rest = _repeat(f"{_COMMA} {item}", max(low - 1, 0), None if high is None else high - 1)
        body = f"{item} {rest}"
        return self._rule(f"{hint}_array", f'"[" {body} "]"' if low else f'"[" ({body})? "]"')

    def _object(self, schema: dict[str, Any], hint: str, depth: int) -> str:
        properties = schema.get("properties", {})
        required = schema.get("required", [])
        if not isinstance(properties, dict):
            raise UnsupportedSchema(f"{hint}: properties must be an object")
        if not isinstance(required, list) or set(required) - set(properties):
            raise UnsupportedSchema(f"{hint}: required names a property it does not define")
        # Strict by default once properties are given (XGrammar's and OpenAI's reading);
        # any object when there are none.
        extra_schema = schema.get("additionalProperties", not properties)
        if not properties and extra_schema in (True, {}):
            return self._basic("json_object")
        extra = None
        if extra_schema is not False:
            value = self._value(extra_schema, f"{hint}_extra", depth + 1)
            extra = f"{self._basic('json_string')} {_COLON} {value}"
        pairs = [
            f"{_json_literal(key)} {_COLON} {self._value(sub, f'{hint}_{key}', depth + 1)}"
            for key, sub in properties.items()
        ]
        needed = [key in required for key in properties]
        # rest[k]: properties k.. after at least one pair was written (each needs a comma).
        rest: list[str] = [""] * (len(pairs) + 1)
        rest[-1] = f"({_COMMA} {extra})*" if extra else ""
        for k in range(len(pairs) - 1, 0, -1):
            step = f"{_COMMA} {pairs[k]}" if needed[k] else f"({_COMMA} {pairs[k]})?"
            rest[k] = self._rule(f"{hint}_after_{k}", f"{step} {rest[k + 1]}".strip())
        # The first pair written is property k when every property before k is optional.
        firsts: list[str] = []
        may_be_empty = True
        for k, pair in enumerate(pairs):
            firsts.append(f"{pair} {rest[k + 1]}".strip())
            if needed[k]:
                may_be_empty = False
                break
        if may_be_empty and extra:
            firsts.append(f"{extra} {rest[-1]}")
        if not firsts:
            return '"{" "}"'
        body = _alternatives(firsts) if not may_be_empty else f"({' | '.join(firsts)})?"
        return self._rule(f"{hint}_object", f'"{{" {body} "}}"')


def _count(schema: dict[str, Any], key: str, hint: str) -> int | None:
    value = schema.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UnsupportedSchema(f"{hint}: {key} must be a non-negative integer")
    return value
