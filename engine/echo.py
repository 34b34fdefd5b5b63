"""Bounded echoes: the one helper for every place that repeats or keeps what a client sent.

A client may send a 10 MB model name, tool type or header. Whatever of it the server says
back (error messages, 404 bodies), keeps (the request log, stored responses, metrics labels)
or writes to its log file goes through :func:`clip`, so each echo is at most a known number
of UTF-8 bytes and a cut is visible: the text ends with :data:`MARKER` and how long the
original was.

Pure functions: safe on any thread. Cost is bounded by the limit, not by the text (a 10 MB
name is sliced, never encoded whole).
"""

from __future__ import annotations

from typing import Final

NAME_BYTES: Final = 256
"""A name, id or type repeated inside a sentence (model ids are at most 128 characters)."""
MESSAGE_BYTES: Final = 2048
"""A whole error message, as answered, logged and kept in the request log."""
HEADER_BYTES: Final = 512
"""A header kept in the request log (``User-Agent``, the headers "copy as curl" replays)."""
URL_BYTES: Final = 4096
"""A request's URL, as the request log keeps it for "copy as curl"."""
LOG_LINE_BYTES: Final = 16 * 1024
"""One line of the log file (a traceback after it is not counted)."""

MARKER: Final = "…[truncated]"
_MIN_LIMIT: Final = 64  # room for some text, the marker and the original's length


def clip(text: str, limit: int = NAME_BYTES) -> str:
    """``text`` if it fits ``limit`` UTF-8 bytes, else its start, :data:`MARKER` and the
    original length in characters, all within ``limit`` bytes.

    Raises:
        ValueError: ``limit`` is too small to hold the marker (a programming error).
    """
    if limit < _MIN_LIMIT:
        raise ValueError(f"clip limit {limit} is below {_MIN_LIMIT} bytes")
    if len(text) * 4 <= limit:  # a character is at most 4 bytes: it fits, whatever it holds
        return text
    head = text[:limit]  # enough characters to fill limit bytes, whatever they are
    data = head.encode("utf-8", "surrogatepass")
    if len(data) <= limit and len(head) == len(text):
        return text
    suffix = f"{MARKER} ({len(text)} characters)"
    room = limit - len(suffix.encode("utf-8"))
    kept = data[:room].decode("utf-8", "ignore")  # never half a character
    return kept + suffix


def clip_optional(text: str | None, limit: int = NAME_BYTES) -> str | None:
    """:func:`clip`, with ``None`` passed through."""
    return None if text is None else clip(text, limit)


def utf8_size(text: str) -> int:
    """The UTF-8 size of ``text`` in bytes (lone surrogates count as three)."""
    return len(text.encode("utf-8", "surrogatepass"))
