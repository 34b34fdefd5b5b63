"""Hermes: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks anywhere.

Qwen2.5, Qwen3, Hermes, SmolLM3 and many fine-tunes. Text around the blocks is content; the
arguments stream as the model writes them. Not thread-safe: one parser per request.
"""

from __future__ import annotations

import logging

from engine.parsing.tool_parsers.base import ToolCallParser, partial_suffix
from engine.parsing.tool_parsers.events import ParseEvent
from engine.parsing.tool_parsers.formats import ToolFormat
from engine.parsing.tool_parsers.json_call import CallReader
from engine.parsing.tool_parsers.values import ToolSchemas

logger = logging.getLogger(__name__)


class _TaggedParser(ToolCallParser):
    """Content with calls inside ``begin`` ... ``end`` blocks (Hermes), or after a marker."""

    begin = ""
    end = ""

    def __init__(self, tools: ToolSchemas | None = None) -> None:
        super().__init__(tools)
        self._buffer = ""
        self._call: CallReader | None = None
        self._region_ws = ""  # the whitespace before a block (text again if it is no call)

    def feed(self, text: str) -> list[ParseEvent]:
        events: list[ParseEvent] = []
        self._buffer += text
        while self._buffer:
            if self._call is None:
                if not self._scan_text(events):
                    break
            elif not self._scan_call(events):
                break
        return self._track(events)

    def _scan_text(self, events: list[ParseEvent]) -> bool:
        at = self._buffer.find(self.begin)
        if at < 0:
            keep = partial_suffix(self._buffer, self.begin)
            cut = len(self._buffer) - keep
            events.extend(self._content(self._buffer[:cut]))
            self._buffer = self._buffer[cut:]
            return False
        events.extend(self._content(self._buffer[:at]))
        self._region_ws, self._held_ws = self._held_ws, ""
        self._buffer = self._buffer[at + len(self.begin) :]
        self._call = self._reader()
        return True

    def _scan_call(self, events: list[ParseEvent]) -> bool:
        call = self._call
        assert call is not None
        if not call.done:
            piece, self._buffer = self._buffer, ""
            seen = len(call.text)  # searched for the end tag already, but for a partial tag
            events.extend(call.feed(piece))
            if not call.done:
                at = call.text.find(self.end, max(0, seen - len(self.end) + 1)) if self.end else -1
                if at < 0:
                    return False
                # The block closed before its JSON did (malformed): end the call there.
                events.extend(call.finish(at))
            self._buffer = call.leftover + self._buffer
            call.leftover = ""
            if call.failed:
                logger.warning("unreadable tool call returned as text: %r", call.consumed[:200])
                events.extend(self._content(self._region_ws + self.begin + call.consumed))
                self._call = None
                return True
        return self._after_call(events)

    def _after_call(self, events: list[ParseEvent]) -> bool:
        """Skip to the end tag after a complete call object."""
        if not self.end:
            self._call = None
            return True
        at = self._buffer.find(self.end)
        if at < 0:
            keep = partial_suffix(self._buffer, self.end)
            self._buffer = self._buffer[len(self._buffer) - keep :] if keep else ""
            return False
        self._buffer = self._buffer[at + len(self.end) :]
        self._call = None
        return True

    def finish(self) -> list[ParseEvent]:
        events: list[ParseEvent] = []
        if self._call is not None:
            events.extend(self._finish_call(self._call, self._region_ws + self.begin))
            if self._call.failed:
                logger.warning("unreadable tool call returned as text: %r", self._call.text[:200])
            self._call = None
        elif self._buffer:
            events.extend(self._content(self._buffer))
        self._buffer = ""
        events.extend(self._flush_ws())
        return self._track(events)


class HermesToolCallParser(_TaggedParser):
    """``<tool_call>{json}</tool_call>`` blocks anywhere in the reply."""

    format = ToolFormat.HERMES
    begin = "<tool_call>"
    end = "</tool_call>"
