"""A string schema's ``format`` as grammar, for the formats response schemas use most.

Why: pydantic writes ``"format": "date-time"`` for a ``datetime`` field, ``uuid`` for a
``UUID``, ``email`` for ``EmailStr`` and ``uri`` for ``AnyUrl``. A schema this converter
could not write went to XGrammar's own JSON-schema grammar, whose compile on a 150k-token
vocabulary can stall the model's every stream for seconds: a ``date-time`` field beside a
5,000-character ``maxLength`` field took 11.8 s on two cores (docs/benchmarks.md "Grammar
compile"), where the compact grammar takes a fraction of a second.

What: each format below as an EBNF expression for the string's body (no quotes) that
admits only valid values, sometimes fewer than the format allows (the grammar narrows
what a model can write, never lets an invalid value through):

* ``date`` (RFC 3339 full-date from year 1000: days per month; February stops at 28),
  ``time`` (with its offset, microseconds at most, no leap second), ``date-time``;
* ``uuid`` (hex, either case), ``ipv4`` (no leading zeros);
* ``hostname`` (up to 4 labels of 1-63 letters, digits and inner hyphens: under 253
  characters), ``email`` (dot-atom local part under 64 characters, a hostname with a dot),
  ``uri`` (a scheme, ``//``, a hostname, an optional port, path, query and fragment of
  unreserved and percent-encoded characters).

Any other format returns ``None`` and the caller falls back to XGrammar, which knows more.

Pure Python; used by :mod:`engine.worker.json_grammar` in the engine worker.
"""

from __future__ import annotations

_DAY_31 = '("0" [1-9] | [12] [0-9] | "3" [01])'
_DAY_30 = '("0" [1-9] | [12] [0-9] | "30")'
_DAY_28 = '("0" [1-9] | "1" [0-9] | "2" [0-8])'
_DATE = (
    '[1-9] [0-9]{3} "-" (("0" [13578] | "1" [02]) "-" '
    + _DAY_31
    + ' | ("0" [469] | "11") "-" '
    + _DAY_30
    + ' | "02-" '
    + _DAY_28
    + ")"
)
_HOUR = '([01] [0-9] | "2" [0-3])'
_MINUTE = "[0-5] [0-9]"
_TIME = (
    f'{_HOUR} ":" {_MINUTE} ":" {_MINUTE} ("." [0-9]{{1,6}})? '
    f'("Z" | "z" | [+\\-] {_HOUR} ":" {_MINUTE})'
)
_HEX = "[0-9a-fA-F]"
_OCTET = '("25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9])'
_LABEL = "[a-zA-Z0-9] ([a-zA-Z0-9\\-]{0,61} [a-zA-Z0-9])?"
_HOSTNAME = f'{_LABEL} ("." {_LABEL}){{0,3}}'
_ATOM = "[a-zA-Z0-9!#$%&'*+/=?^_`{|}~\\-]{1,31}"
_UNRESERVED = "[a-zA-Z0-9._~!$&'()*+,;=:@\\-]"
_PCHAR = f'({_UNRESERVED} | "%" {_HEX} {_HEX})'
_URI = (
    f'[a-zA-Z] [a-zA-Z0-9+.\\-]{{0,15}} "://" {_HOSTNAME} (":" [0-9]{{1,5}})? '
    f'("/" {_PCHAR}*)* ("?" ({_PCHAR} | "/" | "?")*)? ("#" ({_PCHAR} | "/" | "?")*)?'
)

FORMATS = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE} [Tt] {_TIME}",
    "uuid": f'{_HEX}{{8}} "-" {_HEX}{{4}} "-" {_HEX}{{4}} "-" {_HEX}{{4}} "-" {_HEX}{{12}}',
    "ipv4": f'{_OCTET} "." {_OCTET} "." {_OCTET} "." {_OCTET}',
    "hostname": _HOSTNAME,
    "email": f'{_ATOM} ("." {_ATOM})? "@" {_LABEL} ("." {_LABEL}){{1,3}}',
    "uri": _URI,
}


def format_grammar(name: str) -> str | None:
    """The body of a string in format ``name`` (no quotes), or None: not written here."""
    return FORMATS.get(name)
