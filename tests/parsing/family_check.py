"""Shared checks for the tool-call family tests: a reply parsed whole, char by char and
split in two at every position must give the same content, reasoning and calls."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from engine.parsing import (
    ContentDelta,
    ReasoningText,
    ReplyParser,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)

MARKUP = ("<|", "|>", "<tool", "</", "[TOOL", "[THINK", "｜", "<function", "<seed", "<minimax")


@dataclass
class Read:
    content: str
    reasoning: str
    calls: list[tuple[str, Any]]  # (name, arguments decoded)
    streamed: list[tuple[str, str]]  # (name, concatenated argument deltas)
    final: list[tuple[str, str]]  # (name, ToolCallEnd arguments)


def read(pieces: list[str], **kw: Any) -> Read:
    parser = ReplyParser(**kw)
    events = []
    for piece in pieces:
        events += parser.feed(piece)
    events += parser.finish()
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningText))
    streamed: dict[int, list[str]] = {}
    final: list[tuple[str, str]] = []
    for e in events:
        if isinstance(e, ToolCallStart):
            assert e.index not in streamed, "a call started twice"
            streamed[e.index] = [e.name, ""]
        elif isinstance(e, ToolCallDelta):
            streamed[e.index][1] += e.arguments
        elif isinstance(e, ToolCallEnd):
            final.append((e.call.name, e.call.arguments))
    calls = [(name, json.loads(args)) for name, args in final]
    return Read(content, reasoning, calls, [(n, a) for n, a in streamed.values()], final)


def splits(text: str) -> list[list[str]]:
    """The reply whole, one character at a time, and cut in two at every position."""
    return [[text], list(text)] + [[text[:i], text[i:]] for i in range(1, len(text))]


def check(
    text: str,
    *,
    calls: list[tuple[str, Any]],
    content: str = "",
    reasoning: str = "",
    **kw: Any,
) -> None:
    """Every split of ``text`` reads as ``calls``, ``content`` and ``reasoning``."""
    for pieces in splits(text):
        got = read(pieces, **kw)
        where = f"split {[len(p) for p in pieces][:2]}"
        assert got.calls == calls, where
        assert got.streamed == got.final, where  # the deltas add up to the final arguments
        assert got.content == content, where
        assert got.reasoning == reasoning, where
        assert not any(m in got.content for m in MARKUP), where
