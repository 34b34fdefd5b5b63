"""Llama 3.1-3.3: the whole reply is ``{"name": ..., "parameters": {...}}``.

Optionally after ``<|python_tag|>``, several calls separated by ``;``. A reply that is not
a call is content. Not thread-safe: one parser per request.
"""

from __future__ import annotations

from engine.parsing.tool_parsers.base import ToolCallParser
from engine.parsing.tool_parsers.events import ParseEvent
from engine.parsing.tool_parsers.formats import ToolFormat
from engine.parsing.tool_parsers.json_call import CallReader
from engine.parsing.tool_parsers.values import ToolSchemas


class Llama3ToolCallParser(ToolCallParser):
    """A reply that *is* one or more JSON calls (``;``-separated), or plain content."""

    format = ToolFormat.LLAMA3
    argument_keys = ("parameters", "arguments")
    python_tag = "<|python_tag|>"

    def __init__(self, tools: ToolSchemas | None = None) -> None:
        super().__init__(tools)
        self._mode = "start"  # "start", "calls", "content"
        self._tagged = False
        self._buffer = ""
        self._call: CallReader | None = None

    def feed(self, text: str) -> list[ParseEvent]:
        events: list[ParseEvent] = []
        if self._mode == "content":
            return self._content(text)
        self._buffer += text
        if self._mode == "start":
            stripped = self._buffer.lstrip()
            if not stripped or self.python_tag.startswith(stripped):
                return []
            if stripped.startswith(self.python_tag):
                self._tagged = True
                self._buffer = stripped[len(self.python_tag) :]
                self._mode = "calls"
            elif stripped.startswith("{"):
                self._mode = "calls"
            else:
                self._mode = "content"
                text, self._buffer = self._buffer, ""
                return self._content(text)
        self._read_calls(events)
        return self._track(events)

    def _read_calls(self, events: list[ParseEvent]) -> None:
        while self._buffer and self._mode == "calls":
            if self._call is None:
                stripped = self._buffer.lstrip(" \t\r\n;")
                if not stripped:
                    self._buffer = ""
                    return
                if not stripped.startswith("{"):
                    self._mode = "content"
                    self._buffer = ""
                    events.extend(self._content(stripped))
                    return
                self._buffer = stripped
                self._call = self._reader()
            piece, self._buffer = self._buffer, ""
            events.extend(self._call.feed(piece))
            # Plain JSON content (for example a response_format answer), or not a call.
            plain = self._call.header_failed and not self._tagged and not self.calls
            if plain or self._call.failed:
                self._mode = "content"
                events.extend(self._content(self._call.text + self._call.leftover))
                self._call = None
                return
            if not self._call.done:
                return
            self._buffer = self._call.leftover
            self._call = None

    def finish(self) -> list[ParseEvent]:
        events: list[ParseEvent] = []
        if self._mode == "start" and self._buffer:
            events.extend(self._content(self._buffer))
        elif self._call is not None:
            events.extend(self._finish_call(self._call))
            self._call = None
        self._buffer = ""
        events.extend(self._flush_ws())
        return self._track(events)
