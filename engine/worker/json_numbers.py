"""Bounded JSON numbers as grammar: ``minimum``, ``maximum`` and their exclusive forms.

Why: agents' tool schemas bound their integers (Claude Code's ``Read`` takes an ``offset``
with ``"minimum": 0, "maximum": 9007199254740991``). A schema this module could not write
fell back to XGrammar's own JSON-schema grammar, which compiles many times slower on a
150k-token vocabulary (seconds per tool set, docs/benchmarks.md "Grammar compile"), and a
request that changes its tools pays that compile before its first token.

What: a decimal range as an EBNF expression with no leading zeros, built the way regex
range generators build one (split by digit count, then by the first digit that differs),
so a bound is exact, not approximated. Integer bounds hold for ``integer`` and ``number``
alike; a ``number`` with a fractional bound (``"maximum": 0.5``) is refused
(:class:`~engine.worker.json_grammar.UnsupportedSchema`) and the caller falls back. A
bounded number is written without an exponent (still every value in range can be written:
the grammar narrows the spelling, never the value). Magnitudes are capped at 16 digits
before the point, as the unbounded rules are.

Pure Python; used by :mod:`engine.worker.json_grammar` in the engine worker.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The unbounded rules' cap: at most 16 digits before the decimal point.
MAX_MAGNITUDE = 10**16 - 1
# A fraction that is not zero (its last digit is not 0), and one that is.
_NONZERO_FRACTION = '"." [0-9]{0,15} [1-9]'
_ZERO_FRACTION = '("." "0"{1,16})?'


class Unbounded(ValueError):
    """The bounds cannot be written exactly (a fractional bound on a number, a bad value)."""


@dataclass(frozen=True)
class Bound:
    """One side of a range: ``value``, and whether the value itself is excluded."""

    value: int
    exclusive: bool = False


def bounds_of(schema: dict[str, object], integer: bool) -> tuple[Bound | None, Bound | None]:
    """The lower and upper bound ``schema`` sets (``None``: that side is open).

    Reads draft 2020-12 (``exclusiveMinimum`` a number) and draft 4 (a boolean beside
    ``minimum``). For an integer a fractional bound is rounded inward, which is exact.

    Raises:
        Unbounded: a bound that is not a finite number, or fractional on a ``number``.
    """
    lower = _side(schema, "minimum", "exclusiveMinimum", integer, up=True)
    upper = _side(schema, "maximum", "exclusiveMaximum", integer, up=False)
    return lower, upper


def _side(
    schema: dict[str, object], inclusive_key: str, exclusive_key: str, integer: bool, up: bool
) -> Bound | None:
    found: list[Bound] = []
    exclusive = schema.get(exclusive_key)
    for key, value, excl in (
        (inclusive_key, schema.get(inclusive_key), exclusive is True),
        (exclusive_key, None if isinstance(exclusive, bool) else exclusive, True),
    ):
        if value is None:
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise Unbounded(f"{key} must be a finite number")
        if value == int(value):
            found.append(Bound(int(value), excl))
        elif integer:  # the nearest integer inside the range, which is then inclusive
            found.append(Bound(math.ceil(value) if up else math.floor(value)))
        else:
            raise Unbounded(f"{key} {value} is fractional")
    if not found:
        return None
    # The tighter of two bounds on one side (minimum and exclusiveMinimum both set).
    sign = 1 if up else -1
    return max(found, key=lambda b: (sign * b.value, b.exclusive))


def bounded_number(lower: Bound | None, upper: Bound | None, integer: bool) -> str:
    """An EBNF expression for the JSON numbers (integers if ``integer``) in the range.

    Raises:
        Unbounded: no value lies in the range.
    """
    options: list[str] = []
    # Non-negative values x: x = n + f, n an integer and f the fraction.
    low = lower if lower is not None and lower.value >= 0 else Bound(0)
    options += _magnitudes(low, upper, integer)
    # Negative values x = -m, m > 0: lower <= x <= upper  <=>  -upper <= m <= -lower.
    if lower is None or lower.value < 0:
        neg_low = Bound(-upper.value, upper.exclusive) if upper is not None else None
        if neg_low is None or neg_low.value <= 0:
            neg_low = Bound(0, exclusive=True)
        neg_high = Bound(-lower.value, lower.exclusive) if lower is not None else None
        options += [f'"-" {option}' for option in _magnitudes(neg_low, neg_high, integer)]
    if not options:
        raise Unbounded("no value lies between the bounds")
    return _group_all(options)


def _magnitudes(low: Bound, high: Bound | None, integer: bool) -> list[str]:
    """Non-negative values m with ``low`` <= m <= ``high`` (each side maybe exclusive).

    A whole value n (no fraction, or a zero one) is in range when n is; a value n + f with
    f > 0 when ``low.value`` <= n < ``high.value``, whether the bounds are exclusive or not
    (the bounds are integers).
    """
    top = MAX_MAGNITUDE if high is None else min(high.value, MAX_MAGNITUDE)
    whole_low = low.value + 1 if low.exclusive else low.value
    whole_high = top - 1 if high is not None and high.exclusive and top == high.value else top
    options = []
    whole = digit_range(whole_low, whole_high)
    if whole is not None:
        options.append(whole if integer else f"{_group(whole)} {_ZERO_FRACTION}")
    if not integer:
        part_high = top - 1 if high is not None and top == high.value else top
        part = digit_range(low.value, part_high)
        if part is not None:
            options.append(f"{_group(part)} {_NONZERO_FRACTION}")
    return options


def digit_range(low: int, high: int) -> str | None:
    """An EBNF expression for the decimal integers ``low``..``high`` (no sign, no leading
    zero), or ``None`` when the range is empty."""
    low = max(low, 0)
    if low > high:
        return None
    options: list[str] = []
    full: list[int] = []  # digit counts whose every number is in range (merged below)
    for digits in range(len(str(low)), len(str(high)) + 1):
        first = 0 if digits == 1 else 10 ** (digits - 1)
        start, end = max(low, first), min(high, 10**digits - 1)
        if digits > 1 and start == first and end == 10**digits - 1:
            full.append(digits)
        elif start <= end:
            options += _same_length(str(start), str(end))
    if full:  # consecutive counts, as the loop runs: [1-9] then 1..n more digits
        low_rest, high_rest = full[0] - 1, full[-1] - 1
        rest = (
            f"[0-9]{{{low_rest}}}" if low_rest == high_rest else f"[0-9]{{{low_rest},{high_rest}}}"
        )
        options.append(f"[1-9] {rest}")
    return _group_all(options)


def _same_length(low: str, high: str) -> list[str]:
    """Alternatives for the numbers ``low``..``high``, both written with the same count of
    digits (``low`` <= ``high``)."""
    if low == high:
        return [f'"{low}"']
    rest = len(low) - 1
    if low[1:] == "0" * rest and high[1:] == "9" * rest:
        return [_seq(_digit_class(low[0], high[0]), _any_digits(rest))]
    if low[0] == high[0]:
        return [_seq(f'"{low[0]}"', _group_all(_same_length(low[1:], high[1:])))]
    out = [_seq(f'"{low[0]}"', _group_all(_same_length(low[1:], "9" * rest)))]
    if int(high[0]) - int(low[0]) > 1:
        middle = _digit_class(str(int(low[0]) + 1), str(int(high[0]) - 1))
        out.append(_seq(middle, _any_digits(rest)))
    out.append(_seq(f'"{high[0]}"', _group_all(_same_length("0" * rest, high[1:]))))
    return out


def _digit_class(low: str, high: str) -> str:
    return f'"{low}"' if low == high else f"[{low}-{high}]"


def _any_digits(count: int) -> str:
    return "" if count == 0 else "[0-9]" if count == 1 else f"[0-9]{{{count}}}"


def _seq(*parts: str) -> str:
    return " ".join(part for part in parts if part)


def _group_all(options: list[str]) -> str:
    return options[0] if len(options) == 1 else "(" + " | ".join(options) + ")"


def _group(expression: str) -> str:
    return f"({expression})" if " " in expression else expression
