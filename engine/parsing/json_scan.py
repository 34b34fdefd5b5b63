"""Incremental scanning of JSON text as a model writes it, character by character.

The tool-call parsers need two things before a JSON object is complete: where a value ends
(so a streamed ``arguments`` piece never includes the enclosing ``}``), and whether a prefix
such as ``{"name": "get_wea`` can still become a tool-call header. Neither needs a full
parser; these helpers track nesting and string state only and leave validation to
``json.loads`` on the finished text.

Pure functions and small state objects; no threads, no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

_WS = " \t\r\n"


class JSONScanner:
    """Finds where the JSON value starting at the first non-space character ends.

    Feed text in pieces; :attr:`end` becomes the index (in the concatenated text) just past
    the value once it is complete. Objects, arrays and strings end at their closing
    character; a bare number or literal ends at the first character that cannot belong to it.
    """

    def __init__(self) -> None:
        self.text = ""
        self.end: int | None = None
        self._pos = 0
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._kind: str | None = None  # "container", "string" or "scalar"

    @property
    def kind(self) -> str | None:
        """``"container"``, ``"string"`` or ``"scalar"`` once the first character is seen."""
        return self._kind

    def feed(self, text: str) -> int | None:
        """Add text; return :attr:`end` (``None`` while the value is still open)."""
        self.text += text
        while self.end is None and self._pos < len(self.text):
            self._step(self.text[self._pos])
            self._pos += 1
        return self.end

    def _step(self, ch: str) -> None:
        if self._kind is None:
            self._first(ch)
        elif self._kind == "scalar":
            if ch in _WS or ch in ",}]":
                self.end = self._pos
        elif self._in_string:
            self._string_char(ch)
        elif ch == '"':
            self._in_string = True
        elif ch in "{[":
            self._depth += 1
        elif ch in "}]":
            self._depth -= 1
            if self._depth == 0:
                self.end = self._pos + 1

    def _first(self, ch: str) -> None:
        if ch in _WS:
            return
        if ch in "{[":
            self._kind, self._depth = "container", 1
        elif ch == '"':
            self._kind, self._in_string = "string", True
        else:
            self._kind = "scalar"

    def _string_char(self, ch: str) -> None:
        if self._escape:
            self._escape = False
        elif ch == "\\":
            self._escape = True
        elif ch == '"':
            self._in_string = False
            if self._kind == "string":
                self.end = self._pos + 1

    def finish(self) -> int | None:
        """The end of a scalar that ran to the end of the text (``None`` if still open)."""
        if self.end is None and self._kind == "scalar":
            self.end = len(self.text)
        return self.end


@dataclass(frozen=True)
class Header:
    """A matched ``{"name": "...", "arguments": `` prefix of a tool-call object."""

    name: str
    arguments_at: int  # index of the first character of the arguments value


PARTIAL = "partial"
NO_MATCH = "no_match"


class _Stop(Exception):
    """Matching ended early; ``state`` is :data:`PARTIAL` or :data:`NO_MATCH`."""

    def __init__(self, state: str) -> None:
        super().__init__(state)
        self.state = state


def match_call_header(
    text: str, argument_keys: tuple[str, ...] = ("arguments", "parameters")
) -> Header | str:
    """Match ``{"name": "<name>", "<arguments key>": `` at the start of ``text``.

    Returns:
        A :class:`Header` on a full match, :data:`PARTIAL` while ``text`` may still become
        one, or :data:`NO_MATCH` when it cannot (another key first, not an object).
    """
    try:
        pos = _literal(text, _skip_ws(text, 0), "{")
        pos = _literal(text, _skip_ws(text, pos), '"name"')
        pos = _skip_ws(text, _literal(text, _skip_ws(text, pos), ":"))
        name, pos = _string(text, pos)
        pos = _skip_ws(text, _literal(text, _skip_ws(text, pos), ","))
        pos = _any_literal(text, pos, [f'"{key}"' for key in argument_keys])
        pos = _skip_ws(text, _literal(text, _skip_ws(text, pos), ":"))
        if pos >= len(text):
            raise _Stop(PARTIAL)
    except _Stop as stop:
        return stop.state
    return Header(name, pos)


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


def _literal(text: str, pos: int, expected: str) -> int:
    """The position after ``expected`` at ``pos``, or :class:`_Stop`."""
    available = text[pos : pos + len(expected)]
    if available == expected:
        return pos + len(expected)
    raise _Stop(PARTIAL if expected.startswith(available) else NO_MATCH)


def _any_literal(text: str, pos: int, options: list[str]) -> int:
    partial = False
    for option in options:
        try:
            return _literal(text, pos, option)
        except _Stop as stop:
            partial = partial or stop.state == PARTIAL
    raise _Stop(PARTIAL if partial else NO_MATCH)


def _string(text: str, pos: int) -> tuple[str, int]:
    if pos >= len(text):
        raise _Stop(PARTIAL)
    if text[pos] != '"':
        raise _Stop(NO_MATCH)
    end = _string_end(text, pos)
    if end is None:
        raise _Stop(PARTIAL)
    return str(json.loads(text[pos:end])), end


def _string_end(text: str, start: int) -> int | None:
    """Index just past the JSON string opening at ``start`` (``None`` if unterminated)."""
    escape = False
    for i in range(start + 1, len(text)):
        ch = text[i]
        if escape:
            escape = False
        elif ch == "\\":
            escape = True
        elif ch == '"':
            return i + 1
    return None
