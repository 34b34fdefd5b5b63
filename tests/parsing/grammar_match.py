"""A backtracking matcher for call grammar trees (engine.parsing.tool_parsers.grammar), for tests.

It answers "does this tree accept this text", so each family's grammar can be checked,
without a model, against the family's real wire form (and against text it must refuse).
It follows the trees' meaning as the worker hands them to GenAI's structural tags: ``Text``
inside a ``Tag`` runs to an occurrence of the tag's end, ``Json`` is one JSON value valid for
its schema (``tests.schema_check.conforms``), ``Repeat`` is one or more tags joined by its
separator (one when ``single``), ``Triggered`` free text, then tags from a trigger on.
Exponential in the worst case; the trees and texts of the tests are small.
"""

from __future__ import annotations

import json
import re

from engine.parsing.tool_parsers import grammar as g
from tests.schema_check import conforms

_DECODER = json.JSONDecoder()
_EBNF_TOKEN = re.compile(
    r'\s*(?:(?P<lit>"(?:\\.|[^"\\])*")|(?P<cls>\[(?:\\.|[^\]\\])*\])'
    r"|(?P<name>[A-Za-z_]\w*)|(?P<op>\{\d+(?:,\d*)?\}|[()|?*+]))"
)


def ebnf_regex(grammar: str) -> str:
    """A Python regex for an EBNF grammar without recursion (its rules inlined), in the
    subset the call grammars write: literals, character classes, groups, ``|`` and the
    repetition operators."""
    rules = {}
    for line in grammar.strip().splitlines():
        name, _, body = line.partition("::=")
        rules[name.strip()] = body.strip()

    def expand(name: str, depth: int = 0) -> str:
        assert depth < 50, "recursive grammar"
        out, body, at = [], rules[name], 0
        while at < len(body.rstrip()):
            m = _EBNF_TOKEN.match(body, at)
            assert m, body[at:]
            at = m.end()
            if m["lit"]:
                out.append("(?:" + re.escape(json.loads(m["lit"].replace("\\x", "\\u00"))) + ")")
            elif m["cls"]:
                out.append(m["cls"])
            elif m["name"]:
                out.append("(?:" + expand(m["name"], depth + 1) + ")")
            else:
                out.append("(?:" if m["op"] == "(" else m["op"])
        return "".join(out)

    return expand("root")


def accepts(node: g.Node, text: str) -> bool:
    """Whether ``node`` matches all of ``text``."""
    return len(text) in _ends(node, text, 0, None)


def _ends(node: g.Node, text: str, pos: int, until: str | None) -> set[int]:
    """Every position where a match of ``node`` starting at ``pos`` can end. ``until`` is the
    end string of the enclosing tag (where a ``Text`` may stop)."""
    if isinstance(node, g.Const):
        return {pos + len(node.text)} if text.startswith(node.text, pos) else set()
    if isinstance(node, g.Pattern | g.Ebnf):
        rx = re.compile(node.regex if isinstance(node, g.Pattern) else ebnf_regex(node.grammar))
        return {end for end in range(pos, len(text) + 1) if rx.fullmatch(text, pos, end)}
    if isinstance(node, g.Text):
        if not until:
            return set(range(pos, len(text) + 1))
        at = text.find(until, pos)  # any text up to the first occurrence of the end
        return {at} if at >= 0 else set()
    return _compound_ends(node, text, pos, until)


def _compound_ends(node: g.Node, text: str, pos: int, until: str | None) -> set[int]:
    if isinstance(node, g.Json | g.Repeat | g.Triggered):
        return _block_ends(node, text, pos)
    if isinstance(node, g.Tag):
        if not text.startswith(node.begin, pos):
            return set()
        inner = _ends(node.content, text, pos + len(node.begin), node.end)
        return {e + len(node.end) for e in inner if text.startswith(node.end, e)}
    if isinstance(node, g.Seq):
        positions = {pos}
        for part in node.parts:
            positions = {e for p in positions for e in _ends(part, text, p, until)}
        return positions
    assert isinstance(node, g.OneOf)
    return {e for option in node.options for e in _ends(option, text, pos, until)}


def _block_ends(node: g.Json | g.Repeat | g.Triggered, text: str, pos: int) -> set[int]:
    if isinstance(node, g.Json):
        return _json_ends(node, text, pos)
    if isinstance(node, g.Repeat):
        return _repeat_ends(node, text, pos)
    return _triggered_ends(node, text, pos)


def _json_ends(node: g.Json, text: str, pos: int) -> set[int]:
    try:
        value, end = _DECODER.raw_decode(text, pos)
    except json.JSONDecodeError:
        return set()
    return {end} if conforms(json.loads(node.schema), value) else set()


def _tag_ends(tags: tuple[g.Tag, ...], text: str, pos: int) -> set[int]:
    return {e for tag in tags for e in _ends(tag, text, pos, None)}


def _repeat_ends(node: g.Repeat, text: str, pos: int) -> set[int]:
    found = _tag_ends(node.tags, text, pos)
    if node.single:
        return found
    frontier = set(found)
    while frontier:
        after = set()
        for p in frontier:
            if text.startswith(node.separator, p):
                after |= _tag_ends(node.tags, text, p + len(node.separator))
        frontier = after - found
        found |= after
    return found


def _triggered_ends(node: g.Triggered, text: str, pos: int) -> set[int]:
    """Free text up to a trigger, the tags from there; free text again after them (nothing
    after the first when ``single``)."""
    starts = [at for at in (text.find(t, pos) for t in node.triggers) if at >= 0]
    if not starts:
        return {len(text)}
    ends: set[int] = set()
    for end in _tag_ends(node.tags, text, min(starts)):
        ends |= {end} if node.single else _triggered_ends(node, text, end)
    return ends
