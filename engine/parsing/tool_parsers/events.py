"""What a tool-call parser returns as text streams: content, call start, argument pieces, end.

OpenAI-style streams send the first three; APIs that send calls whole (Ollama) wait for
:class:`ToolCallEnd`. Immutable values; safe to share between threads.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    """One complete call; ``arguments`` is JSON text (an object, as OpenAI sends it)."""

    id: str
    name: str
    arguments: str

    def arguments_object(self) -> Any:
        """The arguments decoded (``{}`` when they are not valid JSON)."""
        try:
            return json.loads(self.arguments) if self.arguments.strip() else {}
        except json.JSONDecodeError:
            return {}

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class ContentDelta:
    """Ordinary reply text."""

    text: str


@dataclass(frozen=True)
class ToolCallStart:
    """A call begins: its position among this reply's calls, a fresh id and the name."""

    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ToolCallDelta:
    """The next piece of a call's arguments (raw JSON text)."""

    index: int
    arguments: str


@dataclass(frozen=True)
class ToolCallEnd:
    """A call is complete."""

    index: int
    call: ToolCall


ParseEvent = ContentDelta | ToolCallStart | ToolCallDelta | ToolCallEnd


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"
