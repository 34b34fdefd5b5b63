"""Tolerant JSON for tool-call arguments: the slips small models make, repaired.

Models write ``{'city': 'Paris',}``, put a raw newline inside a string, write Python's
``True``/``None``, or stop before the last ``}``. :func:`loads_lenient` tries strict JSON first
and, only if that fails, one repair pass (single quotes to double, control characters escaped,
trailing commas dropped, Python literals mapped, open strings and brackets closed) and says
whether it repaired. Every repaired call is counted (:func:`repaired_calls`, shown in
``/metrics``).

Thread-safe: the counter takes a lock; everything else is pure.
"""

from __future__ import annotations

import json
import threading
from typing import Any

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_LITERALS = {"True": "true", "False": "false", "None": "null"}

_lock = threading.Lock()
_repaired = [0]  # one cell, so the counter needs no global statement


class Unrepairable(ValueError):
    """The text is not JSON and no repair made it JSON."""


def loads_lenient(text: str) -> tuple[Any, bool]:
    """``(value, repaired)`` for ``text``; raises :class:`Unrepairable` when even repaired
    it does not parse."""
    try:
        return json.loads(text), False
    except json.JSONDecodeError:
        pass
    fixed = repair_json(text)
    try:
        return json.loads(fixed), True
    except json.JSONDecodeError as exc:
        raise Unrepairable(f"{exc.msg} at {exc.pos} in {text[:200]!r}") from None


def note_repair() -> None:
    """Count one tool call that was returned repaired (any thread)."""
    with _lock:
        _repaired[0] += 1


def repaired_calls() -> int:
    """Tool calls repaired since the process started (any thread)."""
    with _lock:
        return _repaired[0]


def repair_json(text: str) -> str:
    """One pass over ``text`` fixing what small models get wrong (see the module doc)."""
    out: list[str] = []
    closers: list[str] = []
    quote = ""  # the quote character of the string we are in ("" outside strings)
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            i = _string_char(text, i, quote, out)
            if i < 0:  # the string closed
                i = -i
                quote = ""
            continue
        if ch in "\"'":
            quote = ch
            out.append('"')
        elif ch in "{[":
            closers.append("}" if ch == "{" else "]")
            out.append(ch)
        elif ch in "}]":
            _drop_trailing_comma(out)
            if closers:
                closers.pop()
            out.append(ch)
        elif ch.isalpha() or ch == "_":
            word_end = i
            while word_end < len(text) and (text[word_end].isalnum() or text[word_end] == "_"):
                word_end += 1
            word = text[i:word_end]
            out.append(_LITERALS.get(word, word))
            i = word_end
            continue
        else:
            out.append(ch)
        i += 1
    if quote:
        out.append('"')
    for closer in reversed(closers):
        _drop_trailing_comma(out)
        out.append(closer)
    return "".join(out)


def _string_char(text: str, i: int, quote: str, out: list[str]) -> int:
    """Copy one character of a string; returns the next index, negated when it closed."""
    ch = text[i]
    if ch == "\\" and i + 1 < len(text):
        nxt = text[i + 1]
        out.append("'" if nxt == "'" else ch + nxt)
        return i + 2
    if ch == quote:
        out.append('"')
        return -(i + 1)
    if ch == '"':  # a double quote inside a single-quoted string
        out.append('\\"')
    else:
        out.append(_ESCAPES.get(ch, ch))
    return i + 1


def _drop_trailing_comma(out: list[str]) -> None:
    j = len(out) - 1
    while j >= 0 and out[j].isspace():
        j -= 1
    if j >= 0 and out[j] == ",":
        del out[j]
