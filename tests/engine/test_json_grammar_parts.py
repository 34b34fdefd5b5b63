"""Numeric bounds, string patterns and formats as grammar, checked against the definition.

The range, pattern and format writers emit only literals, character classes, groups, ``|`` and
repeats, which read the same as a Python regular expression once the EBNF quotes and
spaces are dropped; so every expression here is compiled with ``re`` and matched against
numbers and strings on both sides of each bound, exhaustively for small ranges. That the
same text compiles and samples correctly in XGrammar is ``test_json_grammar``'s part.
"""

from __future__ import annotations

import random
import re
from fractions import Fraction

import pytest

from engine.worker.json_formats import FORMATS, format_grammar
from engine.worker.json_numbers import (
    MAX_MAGNITUDE,
    Bound,
    Unbounded,
    bounded_number,
    bounds_of,
    digit_range,
)
from engine.worker.json_pattern import UnsupportedPattern, pattern_grammar


def test_digit_ranges_hold_exactly_the_numbers_between() -> None:
    rng = random.Random(7)
    pairs = [(0, 0), (0, 9), (5, 123), (10, 99), (99, 100), (0, MAX_MAGNITUDE)]
    pairs += [(rng.randint(0, 5000), rng.randint(0, 5000)) for _ in range(300)]
    for low, high in pairs:
        expression = digit_range(low, high)
        if low > high:
            assert expression is None
            continue
        assert expression is not None
        regex = _ebnf_regex(expression, "")
        near = [n for edge in (low, high) for n in range(max(0, edge - 25), edge + 25)]
        for n in near + [rng.randint(0, 10**6) for _ in range(20)]:
            assert bool(regex.fullmatch(str(n))) == (low <= n <= high), (low, high, n)
        assert not regex.fullmatch("0" + str(max(low, 1)))  # no leading zero


def test_the_largest_safe_integer_bounds_are_exact() -> None:
    """Claude Code's ``Read.offset``: 0..2**53-1."""
    lower, upper = bounds_of({"minimum": 0, "maximum": 9007199254740991}, integer=True)
    regex = _ebnf_regex(bounded_number(lower, upper, integer=True), "")
    for n in (0, 7, 9007199254740991, 9007199254740990, 8999999999999999, 1000000000000000):
        assert regex.fullmatch(str(n)), n
    for text in ("9007199254740992", "9100000000000000", "-1", "01", "1.5"):
        assert not regex.fullmatch(text), text


BOUNDS = [
    (Bound(0), Bound(10)),
    (Bound(0, True), Bound(10, True)),
    (Bound(-5), Bound(7, True)),
    (None, Bound(-3)),
    (Bound(-12, True), None),
    (Bound(-3), Bound(-1)),
    (None, Bound(0, True)),
    (Bound(0, True), None),
    (Bound(2), Bound(2)),
]
SPELLINGS = [
    f"{n}{fraction}" for n in range(-40, 41) for fraction in ("", ".5", ".25", ".05", ".0")
]


@pytest.mark.parametrize(("lower", "upper"), BOUNDS, ids=str)
@pytest.mark.parametrize("integer", [True, False], ids=["integer", "number"])
def test_bounded_numbers_hold_the_values_in_range(
    lower: Bound | None, upper: Bound | None, integer: bool
) -> None:
    regex = _ebnf_regex(bounded_number(lower, upper, integer), "")
    for text in SPELLINGS:
        value = Fraction(text)
        inside = (lower is None or (value > lower.value if lower.exclusive else value >= lower.value)) and (
            upper is None or (value < upper.value if upper.exclusive else value <= upper.value)
        )  # fmt: skip
        matched = bool(regex.fullmatch(text))
        if matched:  # never a value out of range, nor a fraction for an integer
            assert inside and not (integer and "." in text), text
        # Every value in range stays reachable in its plain spelling.
        plain = "." not in text or (not integer and not text.endswith(".0"))
        if inside and plain and not (integer and "." in text):
            assert matched, text


def test_bounds_read_both_drafts_and_refuse_what_cannot_be_exact() -> None:
    assert bounds_of({"minimum": 1, "exclusiveMinimum": True}, True) == (Bound(1, True), None)
    assert bounds_of({"exclusiveMaximum": 4}, False) == (None, Bound(4, True))
    assert bounds_of({"minimum": 0.5, "maximum": 3.7}, True) == (Bound(1), Bound(3))
    assert bounds_of({"minimum": 2, "exclusiveMinimum": 2}, True) == (Bound(2, True), None)
    with pytest.raises(Unbounded):
        bounds_of({"maximum": 0.5}, integer=False)
    with pytest.raises(Unbounded):
        bounds_of({"minimum": "1"}, integer=True)
    with pytest.raises(Unbounded):
        bounded_number(Bound(5), Bound(4), integer=True)


# pattern -> (JSON string texts it must allow, texts it must refuse)
PATTERNS = {
    "^wf_[a-z0-9-]{6,}$": (
        ['"wf_abc-12"', '"wf_000000"'],
        ['"wf_abc"', '"xwf_abcdef"', '"wf_ABCDEF"'],
    ),
    "^(x|y\\.z)?\\d{3}$": (['"123"', '"x123"', '"y.z123"'], ['"yz123"', '"12"', '"x1234"']),
    "ab": (['"ab"', '"xaby"', '"\\nab\\""'], ['"a b"', '"ba"']),
    '^[^"\\\\]{2}$': (['"xy"', '"\\n\\t"', '"é!"'], ['"\\"a"', '"\\\\a"', '"abc"']),
    "^a.c$": (['"abc"', '"a\\"c"', '"a\\\\c"'], ['"a\\nc"', '"ac"']),
    "^\\s+$": (['" "', '"\\t\\n"', '"\u00a0"'], ['"x"', '""']),
    "^[^\\s]+$": (['"xy"', '"\\""'], ['"a b"', '"a\u00a0b"', '"a\u3000"', '"\\n"']),
}


@pytest.mark.parametrize("pattern", list(PATTERNS), ids=str)
def test_patterns_hold_the_encoded_strings(pattern: str) -> None:
    """The grammar reads the JSON text (``\\"`` for a quote); ``json_char`` here is any
    one encoded character, as json_grammar's rule is."""
    json_char = '([^"\\\\]|\\\\["\\\\/bfnrt])'
    expression = pattern_grammar(pattern, "JSONCHAR")
    regex = _ebnf_regex(expression, json_char)
    allowed, refused = PATTERNS[pattern]
    for text in allowed:
        assert regex.fullmatch(text), text
    for text in refused:
        assert not regex.fullmatch(text), text


def _ebnf_regex(expression: str, json_char: str) -> re.Pattern[str]:
    """An EBNF expression of these writers as a Python regex: literals unquoted and
    escaped, classes and repeats kept, ``JSONCHAR`` read as ``json_char``."""
    out, i = [], 0
    while i < len(expression):
        ch = expression[i]
        if ch == '"':
            end = i + 1
            literal = []
            while expression[end] != '"':
                if expression[end] == "\\":
                    literal.append(expression[end + 1])
                    end += 2
                else:
                    literal.append(expression[end])
                    end += 1
            out.append(re.escape("".join(literal)))
            i = end + 1
        elif ch == "[":
            end = expression.index("]", i + 1)
            out.append(expression[i : end + 1])
            i = end + 1
        elif expression.startswith("JSONCHAR", i):
            out.append(json_char)
            i += len("JSONCHAR")
        elif ch == " ":
            i += 1
        else:
            out.append(ch)
            i += 1
    return re.compile("".join(out))


@pytest.mark.parametrize(
    "pattern",
    [
        "a(?=b)",
        "(a)\\1",
        "\\bword",
        "\\D+",
        "^a|b$",
        "a{2000}",
        "[z-a]",
        "(ab",
        "a$b",
        "*a",
        "[]a]",
    ],
)
def test_patterns_outside_the_subset_are_refused(pattern: str) -> None:
    with pytest.raises(UnsupportedPattern):
        pattern_grammar(pattern, "json_char")


# format -> (values it must allow, values it must refuse)
FORMAT_CASES = {
    "date": (["2026-12-03", "1999-02-28", "2024-04-30"], ["2026-02-30", "2026-04-31", "2026-13-01", "26-12-03", "0000-01-01"]),
    "time": (["10:20:30Z", "23:59:59.123456+05:30", "00:00:00-00:00"], ["24:00:00Z", "10:20:30", "10:60:00Z"]),
    "date-time": (["2026-12-03T17:41:02Z", "2026-01-31t00:00:00.5+01:00"], ["2026-12-03 17:41:02Z", "2026-12-03T17:41:02"]),
    "uuid": (["123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-426614174000"], ["123e4567e89b12d3a456426614174000", "g23e4567-e89b-12d3-a456-426614174000"]),
    "ipv4": (["127.0.0.1", "255.255.255.255", "10.0.10.9"], ["256.0.0.1", "01.2.3.4", "1.2.3"]),
    "hostname": (["localhost", "a-b.example.com", "x1.y2"], ["-a.com", "a-.com", "a..b", "a_b"]),
    "email": (["user.name+tag@example.com", "a@b.co"], ["user@localhost", "a..b@x.com", ".a@x.com", "a@-x.com"]),
    "uri": (["https://example.com", "http://a.b:8080/p/a%20th?q=1&r=/x#frag", "ftp://h/"], ["example.com", "https://", "https://a.com/%zz", "https://a b.com"]),
}  # fmt: skip


def test_every_written_format_has_cases() -> None:
    assert set(FORMAT_CASES) == set(FORMATS)
    assert format_grammar("ipv6") is None


@pytest.mark.parametrize("name", list(FORMAT_CASES))
def test_formats_hold_valid_values_only(name: str) -> None:
    body = format_grammar(name)
    assert body is not None
    regex = _ebnf_regex(body, "")
    allowed, refused = FORMAT_CASES[name]
    for value in allowed:
        assert regex.fullmatch(value), value
    for value in refused:
        assert not regex.fullmatch(value), value
