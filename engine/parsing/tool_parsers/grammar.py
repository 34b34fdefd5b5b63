"""Call grammars in a family's own wire syntax: a small typed tree the worker hands to GenAI.

A forced ``tool_choice`` (``"required"``, a named function, Anthropic ``any``/``tool``) is
enforced by constrained decoding in the syntax the model was taught, and ``"auto"`` holds a
call to the tools' schemas once the model opens one (a lazy grammar with a trigger). The
families whose call is one ``{"name", "arguments"}`` JSON object between fixed markers
(Hermes, Mistral...) are described by :mod:`.constrain`'s ``CallSyntax``; the others
(harmony, DeepSeek, DeepSeek V3.2 DSML, Kimi K2, GLM, Gemma 4, Qwen3-Coder XML, Seed-OSS,
MiniMax-M2) build a :class:`CallGrammar` from the nodes below, each in its own parser
module (``call_grammar``), so a family's markup lives in one place. The nodes mirror
GenAI 2026.4's structural tags (``StructuredOutputConfig.Tag``, ``Concat``, ``Union``,
``Regex``, ``ConstString``, ``AnyText``, ``JSONSchema``, ``TagsWithSeparator``,
``TriggeredTags``); the worker converts
them (``engine.worker.prepare.structured_config``), so this module stays pure and the tree
pickles to the worker. A family that cannot be held to a schema correctly says why with an
:class:`Unconstrained` reason, and its request runs unconstrained (logged).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any


@dataclass(frozen=True)
class Const:
    """Exactly ``text``."""

    text: str


@dataclass(frozen=True)
class Json:
    """A JSON value valid against ``schema`` (JSON text), written compactly."""

    schema: str


@dataclass(frozen=True)
class Pattern:
    """Text matching ``regex`` (XGrammar's regex dialect)."""

    regex: str


@dataclass(frozen=True)
class Ebnf:
    """Text matching ``grammar`` (XGrammar's EBNF dialect, start rule ``root``): for a
    notation whose repetition needs shared rules (structural tags are a tree, no rules)."""

    grammar: str


@dataclass(frozen=True)
class Text:
    """Any text; inside a :class:`Tag` it runs until the tag's ``end``."""


@dataclass(frozen=True)
class Tag:
    """``begin``, then ``content``, then ``end``."""

    begin: str
    content: Node
    end: str


@dataclass(frozen=True)
class Seq:
    """Each part in turn."""

    parts: tuple[Node, ...]


@dataclass(frozen=True)
class OneOf:
    """Any one of ``options``."""

    options: tuple[Node, ...]


@dataclass(frozen=True)
class Repeat:
    """One or more of ``tags`` (any of them each time) joined by ``separator``; ``single``
    stops after the first (``parallel_tool_calls: false``)."""

    tags: tuple[Tag, ...]
    separator: str
    single: bool = False


@dataclass(frozen=True)
class Triggered:
    """Free text until one of ``triggers`` (a prefix of the tags' ``begin``), then one of
    ``tags``; free text again after it. ``single``: nothing more after the first tag."""

    triggers: tuple[str, ...]
    tags: tuple[Tag, ...]
    single: bool = False


Node = Const | Json | Pattern | Ebnf | Text | Tag | Seq | OneOf | Repeat | Triggered


class Unconstrained(str, Enum):
    """Why a family's calls are parsed but not constrained (the request runs unconstrained)."""

    NO_GRAMMAR = "no_grammar"  # no grammar for this family's syntax yet
    SCHEMA_NOTATION = "schema_notation"  # the schema uses what the family's notation lacks
    CORRUPTS_CALLS = "corrupts_calls"  # a grammar was tried and broke calls the model writes

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Function:
    """One tool a call may name: its name and its parameters' JSON schema."""

    name: str
    parameters: dict[str, Any]

    @property
    def schema_text(self) -> str:
        return json.dumps(self.parameters)


@dataclass(frozen=True)
class CallGrammar:
    """A family's call grammar over one request's tools.

    ``tags`` are the ways a call region opens (one per tool, or one section holding every
    call); with ``repeat`` several regions may follow one another, joined by ``separator``
    (a section family holds its calls inside its one tag instead). ``reasoning`` is what may
    come before a forced call (a thinking block, harmony's analysis channel); ``trigger`` the
    text that opens a region, for the lazy grammar (``None``: no lazy grammar).
    """

    tags: tuple[Tag, ...]
    reasoning: Node | None = None
    trigger: str | None = None
    repeat: bool = True
    separator: str = ""
    opened: Node | None = None  # the reasoning when the generation prompt opened it

    def forced(self, single: bool, opened: bool = False) -> Node:
        """Reasoning (optional), then the calls: the reply of a forced ``tool_choice``.

        ``opened``: the prompt ends inside a ``<think>`` block (Qwen3.5, GLM-4.7, DeepSeek
        R1), so the reasoning is the rest of that block (:data:`THINK_OPENED`). Only then:
        with an empty begin a model that does not reason could write any text it likes.
        """
        calls = Repeat(self.tags, self.separator, single or not self.repeat)
        reasoning = self.opened if opened and self.opened is not None else self.reasoning
        if reasoning is None:
            return Seq((GAP, calls))
        # (the calls once, after an optional reasoning: half the grammar of two branches)
        return Seq((GAP, OneOf((Seq((reasoning, GAP)), EMPTY)), calls))

    def lazy(self, single: bool) -> Triggered | None:
        """Free text until the trigger, then the calls (``tool_choice: "auto"``)."""
        if self.trigger is None:
            return None
        return Triggered((self.trigger,), self.tags, single or not self.repeat)


# Whitespace a model writes between its reasoning and its call (bounded: never runs on).
GAP = Pattern(r"[ \n]{0,4}")
# Nothing: the empty alternative of an optional part. GenAI refuses an empty ConstString and
# an empty Regex (``Invalid structural tag``); an empty group compiles and matches nothing.
EMPTY = Pattern("(?:)")
# A ``<think>`` block before a call, opened by the model; and its rest, when the generation
# prompt opened it (Qwen3.5, GLM-4.7, DeepSeek R1 write ``<think>`` there).
THINK = Tag("<think>", Text(), "</think>")
THINK_OPENED = Tag("", Text(), "</think>")

# How an XML family writes one parameter: (name, its schema) -> the element.
ParameterWriter = Callable[[str, dict[str, object]], Node]

GrammarBuilder = Callable[[Sequence[Function], bool], "CallGrammar | Unconstrained"]


def functions_of(tools: Sequence[dict[str, Any]], name: str | None = None) -> list[Function]:
    """The OpenAI tool definitions as :class:`Function` rows (only ``name``'s, if set)."""
    out = []
    for tool in tools:
        function = tool.get("function") or {}
        if name is not None and function.get("name") != name:
            continue
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        out.append(Function(str(function.get("name")), parameters))
    return out


def is_text_parameter(schema: Any) -> bool:
    """Whether an XML-style family writes this parameter's value as bare text (a string)."""
    if not isinstance(schema, dict):
        return False
    if "enum" in schema:
        return all(isinstance(v, str) for v in schema["enum"])
    return schema.get("type") == "string"


def text_value(begin: str, schema: dict[str, Any], end: str) -> Tag:
    """A string parameter written as bare text between ``begin`` and ``end`` (XML-style
    families): one of its ``enum`` values when it has one, else any text up to ``end``."""
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return Tag(begin, OneOf(tuple(Const(str(v)) for v in enum)), end)
    return Tag(begin, Text(), end)


def object_parameters(
    parameters: dict[str, Any],
) -> list[tuple[str, dict[str, Any], bool]] | None:
    """``(name, schema, required)`` for each property of an object schema, in declared
    order; ``None`` when the schema is not a plain object of named properties (XML-style
    calls write one element per property and cannot write anything else)."""
    if parameters.get("type", "object") != "object":
        return None
    properties = parameters.get("properties") or {}
    if not isinstance(properties, dict):
        return None
    if parameters.get("additionalProperties") not in (None, False):
        return None
    if (
        set(parameters)
        - {"type", "properties", "required", "additionalProperties"}
        - {
            "title",
            "description",
            "$schema",
            "strict",
        }
    ):
        return None
    required = set(parameters.get("required") or ())
    return [(key, sub, key in required) for key, sub in properties.items()]


def element_sequence(elements: Sequence[tuple[Node, bool]]) -> Node:
    """Elements in order; the optional ones may be left out (``(node, required)``)."""
    parts: list[Node] = []
    for node, required in elements:
        parts.append(node if required else OneOf((node, EMPTY)))
    return Seq(tuple(parts)) if parts else EMPTY


def ebnf_literal(text: str) -> str:
    """``text`` as an EBNF string literal."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def node_strings(node: Node) -> list[str]:
    """Every literal and schema text in ``node`` (the worker checks them for bad Unicode)."""
    out: list[str] = []
    stack: list[Node] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, Const):
            out.append(item.text)
        elif isinstance(item, Json):
            out.append(item.schema)
        elif isinstance(item, Pattern):
            out.append(item.regex)
        elif isinstance(item, Ebnf):
            out.append(item.grammar)
        elif isinstance(item, Tag):
            out.extend((item.begin, item.end))
            stack.append(item.content)
        elif isinstance(item, Seq | OneOf):
            stack.extend(item.parts if isinstance(item, Seq) else item.options)
        elif isinstance(item, Repeat):
            out.append(item.separator)
            stack.extend(item.tags)
        elif isinstance(item, Triggered):
            out.extend(item.triggers)
            stack.extend(item.tags)
    return out
