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
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_NUMBER = re.compile(r"[+-]?(\d+(?:\.\d*)?|\.\d+)")
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
    if _NUMBER.fullmatch(text):  # "300": seconds, as Ollama's OLLAMA_KEEP_ALIVE takes it
        return float(text)
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    if not body or (text[:1] in "+-" and text[1:2] in "+-"):
        raise ValueError(_expected(text))
    total, at = 0.0, 0
    for match in _PART.finditer(body):
        if match.start() != at:
            raise ValueError(_expected(text))
        total += float(match.group(1)) * _UNITS[match.group(2)]
        at = match.end()
    if at != len(body):
        raise ValueError(_expected(text))
    return sign * total


def _expected(value: object) -> str:
    return (
        f"{value!r} is not a duration: use seconds (a number) or a duration such as "
        '"5m" or "1h30m"; 0 unloads after the request, a negative value keeps the model loaded'
    )
