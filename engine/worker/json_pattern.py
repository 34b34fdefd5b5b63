"""A string schema's ``pattern`` as grammar: the common regular expressions, exactly.

Why: agents' tool schemas carry patterns (Claude Code's ``Workflow`` tool has
``"pattern": "^wf_[a-z0-9-]{6,}$"``). A schema this converter could not write fell back to
XGrammar's JSON-schema grammar for the whole tool set, whose compile took 6 s for that one
tool on a 150k-token vocabulary (docs/benchmarks.md "Grammar compile"), paid again each
time an agent's tool set changes.

What: the ECMA-262 subset patterns are written in (literals, ``.``, classes with ranges
and negation, ``\\d \\w \\s``, groups, ``|``, ``* + ? {n} {n,} {n,m}``, ``^`` and ``$``
around the whole) as an EBNF expression over the string's *JSON-encoded* text: a ``"`` in
the value is ``\\"`` in the JSON, a newline ``\\n``. An unanchored side may have any text
before or after, as JSON Schema's ``pattern`` searches. Each character has one spelling
(``/`` is never ``\\/``; a control character only its short escape, other controls and
``\\uXXXX`` escapes are not written): the grammar may narrow how a value is spelled, never
which values are valid. Anything else (lookaround, backreferences, ``\\b``, ``\\D \\W \\S``,
anchors inside, a repeat over 1,000) raises :class:`UnsupportedPattern`, and the caller
falls back to XGrammar.

Pure Python; used by :mod:`engine.worker.json_grammar` in the engine worker.
"""

from __future__ import annotations

from engine.parsing.tool_parsers.grammar import ebnf_literal

# Unicode without the surrogates (never valid alone in UTF-8).
_ALL = ((0, 0xD7FF), (0xE000, 0x10FFFF))
_LINE_ENDS = {0x0A, 0x0D, 0x2028, 0x2029}
_SHORT_ESCAPES = {0x08: "b", 0x09: "t", 0x0A: "n", 0x0C: "f", 0x0D: "r"}
_ESCAPED_LITERALS = set("\\/^$.|?*+()[]{}-")
_CLASS_ESCAPES = {
    "d": [(0x30, 0x39)],
    "w": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    # ECMA-262's WhiteSpace and LineTerminator, whole: a negated class takes the rest.
    "s": [
        (0x09, 0x0D),
        (0x20, 0x20),
        (0xA0, 0xA0),
        (0x1680, 0x1680),
        (0x2000, 0x200A),
        (0x2028, 0x2029),
        (0x202F, 0x202F),
        (0x205F, 0x205F),
        (0x3000, 0x3000),
        (0xFEFF, 0xFEFF),
    ],
}
_CONTROL_ESCAPES = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B}
MAX_REPEAT = 1000

Ranges = list[tuple[int, int]]


class UnsupportedPattern(ValueError):
    """The pattern uses a construct this module does not write (the message says which)."""


def pattern_grammar(pattern: str, string_char: str) -> str:
    """An EBNF expression for a JSON string (quotes included) whose value matches
    ``pattern``; ``string_char`` is the rule for any one encoded character (the free
    text on an unanchored side).

    Raises:
        UnsupportedPattern: the pattern is outside the supported subset.
    """
    start = pattern.startswith("^")
    body = pattern[1:] if start else pattern
    end = body.endswith("$") and not _escaped_at(body, len(body) - 1)
    body = body[:-1] if end else body
    parser = _Parser(body)
    branches = parser.alternatives()
    if parser.pos != len(body):
        raise UnsupportedPattern(f"unexpected {body[parser.pos]!r} in the pattern")
    if len(branches) > 1 and (start or end):
        # "^a|b$" anchors each branch on one side only; rare, and not worth the cases.
        raise UnsupportedPattern("anchors around a top-level | are not supported")
    inner = _join_alternatives(branches)
    parts = ['"\\""']
    parts += [] if start else [f"{string_char}*"]
    parts += [inner] if inner else []
    parts += [] if end else [f"{string_char}*"]
    parts.append('"\\""')
    return " ".join(parts)


def _escaped_at(text: str, index: int) -> bool:
    count = 0
    while index - 1 - count >= 0 and text[index - 1 - count] == "\\":
        count += 1
    return count % 2 == 1


class _Parser:
    """A recursive-descent reader of the subset; each method returns EBNF text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def _peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def alternatives(self) -> list[str]:
        branches = [self._sequence()]
        while self._peek() == "|":
            self.pos += 1
            branches.append(self._sequence())
        return branches

    def _sequence(self) -> str:
        items: list[str] = []
        while self._peek() not in ("", "|", ")"):
            atom = self._atom()
            items.append(self._quantified(atom))
        return " ".join(item for item in items if item)

    def _atom(self) -> str:
        ch = self._peek()
        self.pos += 1
        if ch == "(":
            if self.text.startswith("?:", self.pos):
                self.pos += 2
            elif self._peek() == "?":
                raise UnsupportedPattern("lookaround and named groups are not supported")
            inner = _join_alternatives(self.alternatives())
            if self._peek() != ")":
                raise UnsupportedPattern("unbalanced parenthesis")
            self.pos += 1
            return f"({inner})" if inner else ""
        if ch == "[":
            return _ranges_grammar(self._class())
        if ch == ".":
            return _ranges_grammar(_subtract(list(_ALL), [(c, c) for c in _LINE_ENDS]))
        if ch == "\\":
            return _ranges_grammar(self._escape(in_class=False))
        if ch in "^$":
            raise UnsupportedPattern(f"{ch!r} inside the pattern is not supported")
        if ch in "*+?{":
            raise UnsupportedPattern(f"nothing to repeat before {ch!r}")
        if ch in ")]}":
            raise UnsupportedPattern(f"unbalanced {ch!r}")
        return _ranges_grammar([(ord(ch), ord(ch))])

    def _quantified(self, atom: str) -> str:
        ch = self._peek()
        if ch in ("*", "+", "?"):
            self.pos += 1
            suffix = ch
        elif ch == "{":
            close = self.text.find("}", self.pos)
            spec = self.text[self.pos + 1 : close] if close > 0 else ""
            low_text, comma, high_text = spec.partition(",")
            if not low_text.isdigit() or (high_text and not high_text.isdigit()):
                raise UnsupportedPattern(f"bad repeat {{{spec}}}")
            low, high = int(low_text), int(high_text) if high_text else None
            if max(low, high or 0) > MAX_REPEAT or (high is not None and high < low):
                raise UnsupportedPattern(f"repeat {{{spec}}} is out of range")
            self.pos = close + 1
            suffix = f"{{{low}}}" if not comma else f"{{{low},{'' if high is None else high}}}"
        else:
            return atom
        if self._peek() == "?":  # lazy: the same strings
            self.pos += 1
        if not atom:
            return ""
        return f"({atom}){suffix}"

    def _class(self) -> Ranges:
        negated = self._peek() == "^"
        self.pos += negated
        ranges: Ranges = []
        first = True
        while True:
            ch = self._peek()
            if ch == "":
                raise UnsupportedPattern("unterminated character class")
            if ch == "]":
                if first:  # ECMA-262 reads "[]" as matching nothing, not as a literal "]"
                    raise UnsupportedPattern("an empty character class")
                self.pos += 1
                break
            first = False
            low = self._class_item()
            if self._peek() == "-" and self.text[self.pos + 1 : self.pos + 2] not in ("]", ""):
                self.pos += 1
                high = self._class_item()
                if len(low) != 1 or len(high) != 1 or low[0][0] != low[0][1]:
                    raise UnsupportedPattern("a range between classes is not supported")
                if high[0][0] != high[0][1] or high[0][0] < low[0][0]:
                    raise UnsupportedPattern("a character range out of order")
                ranges.append((low[0][0], high[0][0]))
            else:
                ranges += low
        return _subtract(list(_ALL), ranges) if negated else ranges

    def _class_item(self) -> Ranges:
        ch = self._peek()
        self.pos += 1
        if ch == "\\":
            return self._escape(in_class=True)
        return [(ord(ch), ord(ch))]

    def _escape(self, in_class: bool) -> Ranges:
        ch = self._peek()
        self.pos += 1
        if ch in _CLASS_ESCAPES:
            return list(_CLASS_ESCAPES[ch])
        if ch in _CONTROL_ESCAPES:
            code = _CONTROL_ESCAPES[ch]
            return [(code, code)]
        if ch in ("u", "x"):
            width = 4 if ch == "u" else 2
            digits = self.text[self.pos : self.pos + width]
            if len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise UnsupportedPattern(f"bad \\{ch} escape")
            self.pos += width
            code = int(digits, 16)
            return [(code, code)]
        if ch in _ESCAPED_LITERALS or ch == '"' or (in_class and ch == "b"):
            code = 0x08 if ch == "b" else ord(ch)
            return [(code, code)]
        raise UnsupportedPattern(f"the escape \\{ch} is not supported")


def _join_alternatives(branches: list[str]) -> str:
    if len(branches) == 1:
        return branches[0]
    if any(not branch for branch in branches):  # an empty branch: the whole is optional
        rest = [branch for branch in branches if branch]
        return f"({' | '.join(rest)})?" if rest else ""
    return "(" + " | ".join(branches) + ")"


def _subtract(ranges: Ranges, removed: Ranges) -> Ranges:
    out: Ranges = []
    for low, high in ranges:
        pieces = [(low, high)]
        for r_low, r_high in removed:
            next_pieces = []
            for p_low, p_high in pieces:
                if r_high < p_low or r_low > p_high:
                    next_pieces.append((p_low, p_high))
                    continue
                if p_low < r_low:
                    next_pieces.append((p_low, r_low - 1))
                if r_high < p_high:
                    next_pieces.append((r_high + 1, p_high))
            pieces = next_pieces
        out += pieces
    return out


def _ranges_grammar(ranges: Ranges) -> str:
    """The encoded spellings of one character from ``ranges``: a class for the characters
    JSON writes as themselves, literals for ``"``, ``\\`` and the short-escaped controls."""
    plain = _subtract(
        _subtract(ranges, [(0xD800, 0xDFFF)]), [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]
    )
    options = []
    if len(plain) == 1 and plain[0][0] == plain[0][1]:
        options.append(ebnf_literal(chr(plain[0][0])))
    elif plain:
        options.append("[" + "".join(_class_range(low, high) for low, high in plain) + "]")
    for code, letter in sorted(_SHORT_ESCAPES.items()):
        if any(low <= code <= high for low, high in ranges):
            options.append(f'"\\\\{letter}"')
    for code, text in ((0x22, '"\\\\\\""'), (0x5C, '"\\\\\\\\"')):
        if any(low <= code <= high for low, high in ranges):
            options.append(text)
    if not options:
        raise UnsupportedPattern("a class no JSON character can match")
    return options[0] if len(options) == 1 else "(" + " | ".join(options) + ")"


def _class_range(low: int, high: int) -> str:
    return _class_char(low) if low == high else f"{_class_char(low)}-{_class_char(high)}"


def _class_char(code: int) -> str:
    if chr(code).isascii() and chr(code).isalnum():
        return chr(code)
    return f"\\U{code:08x}" if code > 0xFFFF else f"\\u{code:04x}"
