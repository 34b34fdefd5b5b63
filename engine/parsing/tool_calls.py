"""Parse tool calls out of model text, incrementally, in the syntax the chat template taught.

Three syntaxes cover the open models people run locally:

* ``hermes``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Qwen2.5, Qwen3,
  Hermes, many fine-tunes). Text around the blocks is ordinary content.
* ``llama3``: the whole reply is ``{"name": ..., "parameters": {...}}`` (optionally after
  ``<|python_tag|>``, several calls separated by ``;``), as Llama 3.1-3.3 templates ask.
* ``mistral``: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`` or the newer
  ``[TOOL_CALLS]name[ARGS]{...}``.

A parser takes text pieces as they stream (:meth:`ToolCallParser.feed`) and returns events:
content to show, the start of a call (index, id, name), pieces of its arguments (raw JSON
text, so concatenating them gives the arguments exactly as the model wrote them) and the end
of a call with the whole :class:`ToolCall`. OpenAI-style streams send the first three;
APIs that send calls whole (Ollama) wait for :class:`ToolCallEnd`.

Usage::

    fmt = tool_format_for_template(chat_template)      # "hermes", "llama3" or "mistral"
    parser = new_tool_call_parser(fmt)
    for piece in pieces:
        for event in parser.feed(piece): ...
    for event in parser.finish(): ...
    parser.calls                                       # every complete ToolCall

Not thread-safe: one parser per request, used from one thread (or one event loop).
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.parsing.json_scan import NO_MATCH, Header, JSONScanner, match_call_header

logger = logging.getLogger(__name__)

HERMES, LLAMA3, MISTRAL = "hermes", "llama3", "mistral"
TOOL_FORMATS = (HERMES, LLAMA3, MISTRAL)

# ---- events ------------------------------------------------------------------------------


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


# ---- one call object ---------------------------------------------------------------------


class _CallReader:
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
            obj = json.loads(text)
        except json.JSONDecodeError:
            obj = None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return self._fail(f"not a tool call object: {text[:200]!r}")
        value: Any = next((obj[k] for k in self._keys if k in obj), {})
        if self.started is not None and self._args is not None and self._args.kind == "container":
            end = self._args.end if self._args.end is not None else len(self._args.text)
            arguments = self._args.text[:end].strip()
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


# ---- parsers -----------------------------------------------------------------------------


class ToolCallParser:
    """Splits streamed model text into content and tool calls.

    Subclasses implement one syntax. :attr:`calls` lists the complete calls so far.
    """

    format = ""
    argument_keys: tuple[str, ...] = ("arguments", "parameters")

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self._held_ws = ""  # whitespace that is content only if more content follows
        self._readers: list[_CallReader] = []
        self._extra_calls = 0  # calls parsed whole, without a reader (Mistral)

    def feed(self, text: str) -> list[ParseEvent]:
        """Add generated text; return the events it completes."""
        raise NotImplementedError

    def finish(self) -> list[ParseEvent]:
        """Generation ended; flush everything held back."""
        raise NotImplementedError

    def _reader(self) -> _CallReader:
        reader = _CallReader(self._next_index(), self.argument_keys)
        self._readers.append(reader)
        return reader

    def _next_index(self) -> int:
        return sum(r.call is not None or not r.done for r in self._readers) + self._extra_calls

    @property
    def _called(self) -> bool:
        return self._extra_calls > 0 or any(r.call is not None for r in self._readers)

    def _track(self, events: list[ParseEvent]) -> list[ParseEvent]:
        for event in events:
            if isinstance(event, ToolCallEnd):
                self.calls.append(event.call)
        return events

    def _content(self, text: str) -> list[ParseEvent]:
        """Content, except whitespace that only separates or trails calls.

        Trailing whitespace is held until more content follows: before a call it is dropped,
        at the end of a reply without calls it is released.
        """
        text = self._held_ws + text
        body = text.rstrip()
        self._held_ws = text[len(body) :]
        if self._called:
            body = body.lstrip()
        return [ContentDelta(body)] if body else []

    def _finish_call(self, call: _CallReader, prefix: str = "") -> list[ParseEvent]:
        """The text ended inside ``call``: complete it, or give its text back as content."""
        events = call.finish()
        if call.failed:
            events.extend(self._content(prefix + call.consumed))
        return events

    def _flush_ws(self) -> list[ParseEvent]:
        held, self._held_ws = self._held_ws, ""
        return [ContentDelta(held)] if held and not self._called else []


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of ``text`` that starts ``tag`` (held back while streaming)."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


class _TaggedParser(ToolCallParser):
    """Content with calls inside ``begin`` ... ``end`` blocks (Hermes), or after a marker."""

    begin = ""
    end = ""

    def __init__(self) -> None:
        super().__init__()
        self._buffer = ""
        self._call: _CallReader | None = None

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
            keep = _partial_suffix(self._buffer, self.begin)
            cut = len(self._buffer) - keep
            events.extend(self._content(self._buffer[:cut]))
            self._buffer = self._buffer[cut:]
            return False
        events.extend(self._content(self._buffer[:at]))
        self._held_ws = ""
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
                events.extend(self._content(self.begin + call.consumed))
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
            keep = _partial_suffix(self._buffer, self.end)
            self._buffer = self._buffer[len(self._buffer) - keep :] if keep else ""
            return False
        self._buffer = self._buffer[at + len(self.end) :]
        self._call = None
        return True

    def finish(self) -> list[ParseEvent]:
        events: list[ParseEvent] = []
        if self._call is not None:
            events.extend(self._finish_call(self._call, self.begin))
            self._call = None
        elif self._buffer:
            events.extend(self._content(self._buffer))
        self._buffer = ""
        events.extend(self._flush_ws())
        return self._track(events)


class HermesToolCallParser(_TaggedParser):
    """``<tool_call>{json}</tool_call>`` blocks anywhere in the reply."""

    format = HERMES
    begin = "<tool_call>"
    end = "</tool_call>"


class Llama3ToolCallParser(ToolCallParser):
    """A reply that *is* one or more JSON calls (``;``-separated), or plain content."""

    format = LLAMA3
    argument_keys = ("parameters", "arguments")
    python_tag = "<|python_tag|>"

    def __init__(self) -> None:
        super().__init__()
        self._mode = "start"  # "start", "calls", "content"
        self._tagged = False
        self._buffer = ""
        self._call: _CallReader | None = None

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


class MistralToolCallParser(ToolCallParser):
    """``[TOOL_CALLS]`` then a JSON array of calls, or ``name[ARGS]{...}`` per call."""

    format = MISTRAL
    marker = "[TOOL_CALLS]"
    args_marker = "[ARGS]"

    def __init__(self) -> None:
        super().__init__()
        self._text = _TextUntil(self.marker)
        self._tail = ""  # everything after the marker, parsed when complete
        self._in_calls = False

    def feed(self, text: str) -> list[ParseEvent]:
        if self._in_calls:
            self._tail += text
            return []
        before, found, after = self._text.feed(text)
        events = self._content(before)
        if found:
            self._in_calls = True
            self._tail = after
        return self._track(events)

    def finish(self) -> list[ParseEvent]:
        events: list[ParseEvent] = []
        if not self._in_calls:
            events.extend(self._content(self._text.flush()))
        else:
            events.extend(self._parse_tail())
        events.extend(self._flush_ws())
        return self._track(events)

    def _parse_tail(self) -> list[ParseEvent]:
        tail = self._tail.replace(self.marker, "").strip()
        items: list[tuple[str, Any]] = []
        if tail.startswith("["):
            try:
                decoded = json.loads(tail)
            except json.JSONDecodeError:
                decoded = None
            for item in decoded if isinstance(decoded, list) else []:
                if isinstance(item, dict) and isinstance(item.get("name"), str):
                    items.append((item["name"], item.get("arguments", {})))
        elif self.args_marker in tail:
            name, _, rest = tail.partition(self.args_marker)
            scanner = JSONScanner()
            end = scanner.feed(rest) or scanner.finish() or len(rest)
            with contextlib.suppress(json.JSONDecodeError):
                items.append((name.strip(), json.loads(rest[:end])))
        if not items:
            return self._content(self.marker + self._tail)
        events: list[ParseEvent] = []
        for name, value in items:
            index = self._next_index()
            self._extra_calls += 1
            args = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            call = ToolCall(new_call_id(), name, args)
            events += [
                ToolCallStart(index, call.id, name),
                ToolCallDelta(index, args),
                ToolCallEnd(index, call),
            ]
        return events


class _TextUntil:
    """Passes text through until ``marker``, holding back a possible partial marker."""

    def __init__(self, marker: str) -> None:
        self._marker = marker
        self._held = ""

    def feed(self, text: str) -> tuple[str, bool, str]:
        """Returns (text to release, whether the marker was found, text after it)."""
        buffer = self._held + text
        at = buffer.find(self._marker)
        if at >= 0:
            self._held = ""
            return buffer[:at], True, buffer[at + len(self._marker) :]
        keep = _partial_suffix(buffer, self._marker)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep], False, ""

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held


# ---- choosing a syntax -------------------------------------------------------------------

_PARSERS: dict[str, Callable[[], ToolCallParser]] = {
    HERMES: HermesToolCallParser,
    LLAMA3: Llama3ToolCallParser,
    MISTRAL: MistralToolCallParser,
}


def tool_format_for_template(template: str | None) -> str:
    """The tool-call syntax a chat template teaches its model.

    Templates that show no syntax get ``hermes``, the most common one among open models.
    """
    text = template or ""
    if "<tool_call>" in text:
        return HERMES
    if "[TOOL_CALLS]" in text:
        return MISTRAL
    if "<|python_tag|>" in text or ("<|start_header_id|>" in text and "parameters" in text):
        return LLAMA3
    return HERMES


def new_tool_call_parser(fmt: str) -> ToolCallParser:
    """A fresh parser for one reply in syntax ``fmt`` (one of :data:`TOOL_FORMATS`)."""
    try:
        return _PARSERS[fmt]()
    except KeyError:
        raise ValueError(f"unknown tool-call format {fmt!r}") from None


def parse_tool_calls(fmt: str, text: str) -> tuple[str, list[ToolCall]]:
    """Parse a whole reply at once: (content, calls)."""
    parser = new_tool_call_parser(fmt)
    events = parser.feed(text) + parser.finish()
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    return content, parser.calls


# ---- constraining a call -----------------------------------------------------------------


@dataclass(frozen=True)
class CallSyntax:
    """How one call is written in a syntax: what the grammar must produce around the JSON."""

    begin: str
    end: str
    arguments_key: str


CALL_SYNTAX = {
    HERMES: CallSyntax("<tool_call>\n", "\n</tool_call>", "arguments"),
    LLAMA3: CallSyntax("", "", "parameters"),
    MISTRAL: CallSyntax("[TOOL_CALLS][", "]", "arguments"),
}


def call_schema(fmt: str, tools: list[dict[str, Any]], name: str | None = None) -> dict[str, Any]:
    """JSON schema of one call object to any of ``tools`` (or only to the one named).

    ``tools`` are OpenAI tool definitions (``{"type": "function", "function": {...}}``).
    """
    key = CALL_SYNTAX[fmt].arguments_key
    options = []
    for tool in tools:
        function = tool.get("function") or {}
        if name is not None and function.get("name") != name:
            continue
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": function.get("name")}, key: parameters},
                "required": ["name", key],
                "additionalProperties": False,
            }
        )
    if not options:
        raise ValueError(f"no tool named {name!r}" if name else "no tools")
    return options[0] if len(options) == 1 else {"anyOf": options}
