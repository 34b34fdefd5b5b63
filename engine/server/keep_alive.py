"""``keep_alive`` (Ollama) values: how long a model stays loaded after a request.

Ollama takes a number of seconds or a Go duration string (``"5m"``, ``"1h30m"``, ``"300ms"``);
``0`` means unload right after the request and any negative value means keep it loaded
forever. Anything else is the client's mistake and must be a 400 naming ``keep_alive``,
never a silently ignored field. Pure functions: safe on any thread.
"""

from __future__ import annotations

import math
import re
from typing import Final

from engine.echo import clip

FOREVER: Final = math.inf
"""A negative ``keep_alive``: the model is never unloaded for being idle."""

# The units Go's time.ParseDuration knows, in seconds.
_UNITS: Final = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
# ASCII digits only: Python's \d and float() also read "٣" (Arabic-Indic three) as 3.
_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_NUMBER = re.compile(r"[+-]?([0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
# No duration is longer ("1h2m3s4ms5us6ns" is 15): a longer text is refused unread.
_MAX_DURATION_CHARS: Final = 64
# Longer than any laptop stays up; a bigger finite value is a typo, not a wish.
MAX_SECONDS: Final = 10 * 365 * 24 * 3600.0


def parse_keep_alive(value: float | str) -> float:
    """Seconds the model stays loaded after the request (:data:`FOREVER` for a negative value).

    Raises:
        ValueError: ``value`` is not a number or duration (the message says what is expected).
    """
    if isinstance(value, bool):  # JSON true/false is not a duration
        raise ValueError(_expected(value))
    seconds = float(value) if isinstance(value, int | float) else _parse_duration(value.strip())
    if math.isnan(seconds):
        raise ValueError(_expected(value))
    if seconds < 0:
        return FOREVER
    if seconds > MAX_SECONDS or math.isinf(seconds):
        raise ValueError(f"must be at most {MAX_SECONDS:.0f} seconds (or negative for forever)")
    return seconds


def _parse_duration(text: str) -> float:
    if len(text) > _MAX_DURATION_CHARS:
        raise ValueError(_expected(text))
    if _NUMBER.fullmatch(text):  # "300": seconds, as Ollama's OLLAMA_KEEP_ALIVE takes it
        return float(text)
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    if not body or (text[:1] in "+-" and text[1:2] in "+-"):
        raise ValueError(_expected(text))
    total, at = 0.0, 0
    while at < len(body):  # each part where the last ended (finditer would rescan: O(n²))
        match = _PART.match(body, at)
        if match is None:
            raise ValueError(_expected(text))
        total += float(match.group(1)) * _UNITS[match.group(2)]
        at = match.end()
    return sign * total


def _expected(value: object) -> str:
    return (
        f"{clip(repr(value))} is not a duration: use seconds (a number) or a duration such as "
        '"5m" or "1h30m"; 0 unloads after the request, a negative value keeps the model loaded'
    )
