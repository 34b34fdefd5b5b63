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


class StreamingRepair:
    """:func:`repair_json` as a stream, for arguments sent while the model writes them.

    :meth:`feed` takes raw JSON text and returns the repaired text that can no longer change
    (a trailing comma and a bare word are held until the next character decides them);
    :meth:`finish` returns the rest, closing open strings and brackets. Text after the
    top-level value is ignored. The concatenated output is the whole repaired value, the
    same however the raw text was split. Not thread-safe: one per call.
    """

    def __init__(self) -> None:
        self._quote = ""
        self._escape = False
        self._closers: list[str] = []
        self._pending = ""  # a comma and the whitespace after it, outside strings
        self._word = ""  # a bare word being read (true/True/null/None...)
        self._started = False
        self.done = False  # the top-level value closed

    def feed(self, text: str) -> str:
        out: list[str] = []
        for ch in text:
            if self.done:
                break
            self._char(ch, out)
        return "".join(out)

    def finish(self) -> str:
        out: list[str] = []
        if not self.done:
            self._flush_word(out)
            self._pending = self._pending.replace(",", "", 1)
            out.append(self._pending)
            self._pending = ""
            if self._quote:
                out.append('"')
            out.extend(reversed(self._closers))
            self._closers = []
            self.done = True
        return "".join(out)

    def _char(self, ch: str, out: list[str]) -> None:
        if not self._started:
            if ch.isspace():
                return
            self._started = True
        if self._quote:
            self._string_char(ch, out)
        elif not self._word_char(ch, out):
            self._structural(ch, out)

    def _word_char(self, ch: str, out: list[str]) -> bool:
        """Read a bare word's character; ``False`` when ``ch`` is not part of one."""
        if self._word:
            if ch.isalnum() or ch == "_":
                self._word += ch
                return True
            self._flush_word(out)
        if ch.isalpha() or ch == "_":
            self._flush_pending(out)
            self._word = ch
            return True
        return False

    def _structural(self, ch: str, out: list[str]) -> None:
        if ch in "\"'":
            self._flush_pending(out)
            self._quote = ch
            out.append('"')
        elif ch in "{[":
            self._flush_pending(out)
            self._closers.append("}" if ch == "{" else "]")
            out.append(ch)
        elif ch in "}]":
            out.append(self._pending.replace(",", "", 1))  # a trailing comma is dropped
            self._pending = ""
            if self._closers:
                self._closers.pop()
            out.append(ch)
            self.done = not self._closers
        elif ch == ",":
            self._flush_pending(out)
            self._pending = ","
        elif ch.isspace() and self._pending:
            self._pending += ch
        else:
            self._flush_pending(out)
            out.append(ch)

    def _string_char(self, ch: str, out: list[str]) -> None:
        if self._escape:
            self._escape = False
            out.append("'" if ch == "'" else "\\" + ch)
        elif ch == "\\":
            self._escape = True
        elif ch == self._quote:
            self._quote = ""
            out.append('"')
            self.done = not self._closers
        elif ch == '"':
            out.append('\\"')
        else:
            out.append(_ESCAPES.get(ch, ch))

    def _flush_pending(self, out: list[str]) -> None:
        out.append(self._pending)
        self._pending = ""

    def _flush_word(self, out: list[str]) -> None:
        if self._word:
            self._flush_pending(out)
            out.append(_LITERALS.get(self._word, self._word))
            self._word = ""
