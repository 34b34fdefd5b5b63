"""Reading one ``{"name": ..., "arguments": ...}`` object as it streams (Hermes, Llama 3).

The arguments of the usual shape (name first, arguments an object) are streamed as the model
writes them, raw, so concatenated deltas are exactly the model's JSON. An object that only
parses after repair (single quotes, trailing commas...) is completed with the repaired
arguments; when its raw arguments were already streamed the final :class:`ToolCall` carries
the repaired text. Not thread-safe: one reader per call.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from engine.parsing.json_scan import NO_MATCH, Header, JSONScanner, match_call_header
from engine.parsing.tool_parsers.events import (
    ParseEvent,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    new_call_id,
)
from engine.parsing.tool_parsers.repair import Unrepairable, loads_lenient, note_repair

logger = logging.getLogger(__name__)


class CallReader:
    """Reads one ``{"name": ..., "arguments": ...}`` object from streamed text.

    Streams the arguments of the usual shape (name first, arguments an object) as they are
    written; any other shape is emitted whole once the object is complete.
    """

    def __init__(self, index: int, argument_keys: tuple[str, ...]) -> None:
        self.index = index
        self._keys = argument_keys
        self._outer = JSONScanner()
        self._header: Header | None = None
        self._opaque = False
        self._args: JSONScanner | None = None
        self._sent = 0  # characters of the arguments value already emitted
        self._end: int | None = None  # where the object ended in the text
        self.started: ToolCallStart | None = None
        self.call: ToolCall | None = None
        self.leftover = ""  # text after the object
        self.failed = False  # the object is complete but is not a tool call

    @property
    def text(self) -> str:
        return self._outer.text

    @property
    def done(self) -> bool:
        return self.call is not None or self.failed

    @property
    def header_failed(self) -> bool:
        return self._opaque

    def feed(self, text: str) -> list[ParseEvent]:
        if self.done:
            self.leftover += text
            return []
        end = self._outer.feed(text)
        events: list[ParseEvent] = []
        if self._header is None and not self._opaque:
            header = match_call_header(self.text, self._keys)
            if isinstance(header, Header):
                self._header = header
                self._args = JSONScanner()
                self.started = ToolCallStart(self.index, new_call_id(), header.name)
                events.append(self.started)
            elif header == NO_MATCH:
                self._opaque = True
        if self._header is not None and self._args is not None:
            events.extend(self._stream_arguments())
        if end is not None:
            self._end = end
            self.leftover = self.text[end:]
            events.extend(self._complete(self.text[:end]))
        return events

    @property
    def consumed(self) -> str:
        """The object's text, without what followed it."""
        return self.text[: self._end] if self._end is not None else self.text

    def _stream_arguments(self) -> list[ParseEvent]:
        assert self._header is not None and self._args is not None
        start = self._header.arguments_at
        self._args.feed(self.text[start + len(self._args.text) :])
        if self._args.kind != "container":
            return []  # a string or scalar is decoded and sent whole at the end
        upto = self._args.end if self._args.end is not None else len(self._args.text)
        piece = self._args.text[self._sent : upto]
        self._sent = upto
        return [ToolCallDelta(self.index, piece)] if piece else []

    def _complete(self, text: str) -> list[ParseEvent]:
        try:
            obj, repaired = loads_lenient(text)
        except Unrepairable:
            obj, repaired = None, False
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return self._fail(f"not a tool call object: {text[:200]!r}")
        if repaired:
            note_repair()
            logger.info("tool call to %s repaired", obj["name"])
        value: Any = next((obj[k] for k in self._keys if k in obj), {})
        streamed = self._args is not None and self._args.kind == "container"
        if self.started is not None and self._args is not None and streamed:
            end = self._args.end if self._args.end is not None else len(self._args.text)
            arguments = self._args.text[:end].strip()
            if repaired:
                arguments = json.dumps(value, ensure_ascii=False)
            rest = ""
        else:
            arguments = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            rest = arguments
        events: list[ParseEvent] = []
        if self.started is None:
            self.started = ToolCallStart(self.index, new_call_id(), obj["name"])
            events.append(self.started)
        if rest:
            events.append(ToolCallDelta(self.index, rest))
        self.call = ToolCall(self.started.id, self.started.name, arguments)
        events.append(ToolCallEnd(self.index, self.call))
        return events

    def _fail(self, why: str) -> list[ParseEvent]:
        if self.started is None:
            self.failed = True
            return []
        # Already announced to the client: close it with what was streamed.
        logger.warning("tool call %d ended malformed (%s)", self.index, why)
        arguments = self._args.text[: self._sent].strip() if self._args else ""
        self.call = ToolCall(self.started.id, self.started.name, arguments or "{}")
        return [ToolCallEnd(self.index, self.call)]

    def finish(self, upto: int | None = None) -> list[ParseEvent]:
        """The text ended (at ``upto``, or at its end): complete what can be completed."""
        if self.done:
            return []
        if upto is None:
            self._outer.finish()
            upto = len(self.text)
        self._end = upto
        self.leftover = self.text[upto:]
        return self._complete(self.text[:upto])
