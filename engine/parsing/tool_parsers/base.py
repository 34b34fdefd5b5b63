"""The incremental tool-call parser protocol, and the machinery most families share.

A parser takes text pieces as they stream (:meth:`ToolCallParser.feed`) and returns
:data:`~engine.parsing.tool_parsers.events.ParseEvent` items: content to show, the start of a
call (index, id, name), pieces of its arguments (JSON text: concatenated they equal the
final arguments) and the end of a call with the whole :class:`ToolCall`.

:class:`MarkupToolParser` is the shape of most families: content, then a *region* opened by a
begin marker (``<tool_call>``, ``<|tool_calls_section_begin|>``...) and closed by an end marker
(or by the end of the reply), holding one or more calls. A family says how a region splits
into calls (:meth:`MarkupToolParser._split`); the base finds the regions while holding back a
partial marker, so no markup ever reaches content, and returns each call once it is complete.
Most families also say where the call being written stands
(:meth:`MarkupToolParser._open_args`): the call is announced once its name is known and its
arguments stream through the same repairer the whole call goes through
(:class:`~engine.parsing.tool_parsers.repair.StreamingRepair`), so the deltas always add up
to the final arguments. JSON-argument families (Kimi K2, DeepSeek, harmony, Mistral) stream
the model's JSON; XML families (Qwen3-Coder, Seed-OSS, MiniMax-M2, DSML) stream the JSON
object as it is built, a string parameter character by character
(:func:`~engine.parsing.tool_parsers.xml_params.open_arguments`). Gemma 4, GLM, Nemotron and
Granite calls are sent whole when they complete. A call that cannot be read even after repair comes
back as content and is logged (one already announced while streaming is closed with what was
sent, and logged): a parser never raises on model text.

Not thread-safe: one parser per request, used from one thread (or one event loop).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.parsing.tool_parsers.events import (
    ContentDelta,
    ParseEvent,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    new_call_id,
)
from engine.parsing.tool_parsers.formats import ToolFormat
from engine.parsing.tool_parsers.json_call import CallReader
from engine.parsing.tool_parsers.repair import (
    StreamingRepair,
    Unrepairable,
    loads_lenient,
    note_repair,
)
from engine.parsing.tool_parsers.values import ToolSchemas

logger = logging.getLogger(__name__)


class ToolCallParser:
    """Splits streamed model text into content and tool calls.

    Subclasses implement one syntax. :attr:`calls` lists the complete calls so far.
    """

    format: ToolFormat = ToolFormat.AUTO
    argument_keys: tuple[str, ...] = ("arguments", "parameters")

    def __init__(self, tools: ToolSchemas | None = None) -> None:
        self._schemas = tools  # each tool's parameters schema (types XML-style values)
        self.calls: list[ToolCall] = []
        self._held_ws = ""  # whitespace that is content only if more content follows
        self._readers: list[CallReader] = []
        self._extra_calls = 0  # calls parsed whole, without a reader (Mistral)

    def feed(self, text: str) -> list[ParseEvent]:
        """Add generated text; return the events it completes."""
        raise NotImplementedError

    def finish(self) -> list[ParseEvent]:
        """Generation ended; flush everything held back."""
        raise NotImplementedError

    def _reader(self) -> CallReader:
        reader = CallReader(self._next_index(), self.argument_keys)
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

    def _finish_call(self, call: CallReader, prefix: str = "") -> list[ParseEvent]:
        """The text ended inside ``call``: complete it, or give its text back as content."""
        events = call.finish()
        if call.failed:
            events.extend(self._content(prefix + call.consumed))
        return events

    def _flush_ws(self) -> list[ParseEvent]:
        held, self._held_ws = self._held_ws, ""
        return [ContentDelta(held)] if held and not self._called else []


def partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of ``text`` that starts ``tag`` (held back while streaming)."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


def earliest(text: str, markers: Sequence[str]) -> tuple[int, str | None]:
    """Where the first of ``markers`` occurs in ``text`` (``(-1, None)``: none does)."""
    best, found = -1, None
    for marker in markers:
        at = text.find(marker)
        if at >= 0 and (best < 0 or at < best or (at == best and len(marker) > len(found or ""))):
            best, found = at, marker
    return best, found


def held_back(text: str, markers: Sequence[str]) -> int:
    """How much of the end of ``text`` could still become one of ``markers``."""
    return max((partial_suffix(text, m) for m in markers), default=0)


class TextUntil:
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
        keep = partial_suffix(buffer, self._marker)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep], False, ""

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held


@dataclass(frozen=True)
class ParsedCall:
    """One call read from a region: arguments already JSON text."""

    name: str
    arguments: str
    repaired: bool = False


@dataclass(frozen=True)
class Unparsed:
    """Region text that is no call even after repair: given back as content, and logged."""

    text: str
    why: str


RegionItem = ParsedCall | Unparsed


@dataclass
class _OpenCall:
    """A call announced before its end: its arguments stream through a repairer."""

    index: int
    id: str
    name: str
    streamer: StreamingRepair
    fed: str = ""  # the raw arguments fed so far (leading whitespace stripped)
    sent: str = ""  # the repaired arguments sent so far


@dataclass(frozen=True)
class Block:
    """The body of one ``open``...``close`` element; ``closed`` is False when the reply
    ended inside it (a missing closing tag, repaired)."""

    body: str
    closed: bool


def split_blocks(
    region: str, open_tag: str, close_tag: str, final: bool
) -> tuple[list[Block], int]:
    """The complete ``open``...``close`` elements at the start of ``region`` and the length
    they use. With ``final`` the region is closed: an element left open runs to its end."""
    blocks: list[Block] = []
    pos = 0
    while True:
        start = region.find(open_tag, pos)
        if start < 0:
            break
        body_at = start + len(open_tag)
        end = region.find(close_tag, body_at)
        if end < 0:
            if final:
                blocks.append(Block(region[body_at:], closed=False))
                pos = len(region)
            break
        blocks.append(Block(region[body_at:end], closed=True))
        pos = end + len(close_tag)
    return blocks, pos


class MarkupToolParser(ToolCallParser):
    """Content with calls inside marked regions; a family implements :meth:`_split`.

    Class attributes: ``begins`` (markers opening a region), ``ends`` (markers closing it;
    empty: the region runs to the end of the reply), ``keep_begin`` (begin markers that are
    part of the region's first call, so they are put back in front of the region text) and
    ``end_optional`` (a region ended by the reply is normal, not a repaired missing tag: the
    engine strips the family's stop token, gpt-oss's ``<|call|>``).
    """

    begins: tuple[str, ...] = ()
    ends: tuple[str, ...] = ()
    keep_begin: tuple[str, ...] = ()
    end_optional = False

    def __init__(self, tools: ToolSchemas | None = None) -> None:
        super().__init__(tools)
        self._buffer = ""
        self._marker: str | None = None  # the begin marker of the region we are in
        self._open: _OpenCall | None = None  # a call whose arguments are streaming
        self._region_items = 0  # calls read from the region so far
        self._region_ws = ""  # the whitespace before the region (text again if it is no call)

    def _split(self, region: str, final: bool) -> tuple[list[RegionItem], int]:
        """The complete calls at the start of ``region`` and how much of it they use.

        ``final``: the region is closed (its end marker or the end of the reply), so every
        call in it must be read now (an unclosed last call included)."""
        raise NotImplementedError

    def _open_args(self, rest: str) -> tuple[str, str] | None:
        """The call being written at the start of ``rest`` (the region after its complete
        calls): its name and the raw JSON of its arguments so far, without any (partial)
        closing marker. ``None``: not known yet, or this family's arguments do not stream
        (they are sent whole when the call completes)."""
        return None

    def feed(self, text: str) -> list[ParseEvent]:
        self._buffer += text
        events: list[ParseEvent] = []
        while True:
            if self._marker is None:
                if not self._scan_content(events):
                    break
                continue
            at, end = earliest(self._buffer, self.ends)
            if end is None:
                items, used = self._split(self._buffer, final=False)
                if not any(isinstance(item, Unparsed) for item in items):
                    events.extend(self._items(items))
                    self._buffer = self._buffer[used:]
                    events.extend(self._progress())
                # (else the region is read again when it closes: if nothing in it is a
                # call, all of it goes back as text, as written)
                break
            region, self._buffer = self._buffer[:at], self._buffer[at + len(end) :]
            events.extend(self._close(region, end, unclosed=False))
        return self._track(events)

    def finish(self) -> list[ParseEvent]:
        events: list[ParseEvent] = []
        if self._marker is not None:
            events.extend(self._close(self._buffer, "", unclosed=True))
        elif self._buffer:
            events.extend(self._content(self._buffer))
        self._buffer = ""
        events.extend(self._flush_ws())
        return self._track(events)

    def _scan_content(self, events: list[ParseEvent]) -> bool:
        at, marker = earliest(self._buffer, self.begins)
        if marker is None:
            cut = len(self._buffer) - held_back(self._buffer, self.begins)
            events.extend(self._content(self._buffer[:cut]))
            self._buffer = self._buffer[cut:]
            return False
        events.extend(self._content(self._buffer[:at]))
        self._region_ws, self._held_ws = self._held_ws, ""
        rest = self._buffer[at + len(marker) :]
        self._buffer = marker + rest if marker in self.keep_begin else rest
        self._marker = marker
        self._region_items = 0  # calls (or unreadable calls given back) read from the region
        return True

    def _close(self, region: str, end: str, *, unclosed: bool) -> list[ParseEvent]:
        """A region ended (at ``end``, or with the reply): read every call left in it."""
        marker = self._marker or ""
        self._marker = None
        items, used = self._split(region, final=True)
        if unclosed and region.strip() and not self.end_optional:
            items = [_as_repaired(item) for item in items]
        rest = region[used:]
        readable = any(isinstance(i, ParsedCall) for i in items)
        if self._region_items == 0 and self._open is None and not readable:
            head = "" if marker in self.keep_begin else marker
            why = "; ".join(i.why for i in items if isinstance(i, Unparsed)) or "no call in it"
            logger.warning("unreadable tool call returned as text (%s): %r", why, region[:200])
            return self._content(self._region_ws + head + region + end)
        events = self._items(items)
        if self._open is not None:
            events.extend(self._abandon("the region ended inside it"))
        if rest.strip():
            logger.warning("text inside a tool-call region, returned as text: %r", rest[:200])
            events.extend(self._content(rest))
        return events

    def _items(self, items: list[RegionItem]) -> list[ParseEvent]:
        events: list[ParseEvent] = []
        for item in items:
            if isinstance(item, Unparsed) and self._open is not None:
                events.extend(self._abandon(item.why))
                continue
            if isinstance(item, Unparsed):
                logger.warning("unreadable tool call returned as text (%s)", item.why)
                events.extend(self._content(item.text))
                continue
            self._region_items += 1
            events.extend(self._emit(item))
        return events

    def _progress(self) -> list[ParseEvent]:
        """Announce the call being written and stream its arguments so far."""
        found = self._open_args(self._buffer)
        if found is None:
            return []
        name, raw = found[0].strip(), found[1].lstrip()
        events: list[ParseEvent] = []
        if self._open is None:
            if not name or not raw.startswith("{"):
                return []
            index = self._next_index()
            self._extra_calls += 1
            self._open = _OpenCall(index, new_call_id(), name, StreamingRepair())
            events.append(ToolCallStart(index, self._open.id, name))
        call = self._open
        if not raw.startswith(call.fed):
            return events  # (cannot happen for a family whose hook is consistent)
        piece = call.streamer.feed(raw[len(call.fed) :])
        call.fed = raw
        if piece:
            call.sent += piece
            events.append(ToolCallDelta(call.index, piece))
        return events

    def _abandon(self, why: str) -> list[ParseEvent]:
        """An announced call proved unreadable: close it with what was sent (logged)."""
        call, self._open = self._open, None
        assert call is not None
        logger.warning("tool call %d to %s ended unreadable (%s)", call.index, call.name, why)
        tail = call.streamer.finish()
        arguments = call.sent + tail
        events: list[ParseEvent] = [ToolCallDelta(call.index, tail)] if tail else []
        events.append(ToolCallEnd(call.index, ToolCall(call.id, call.name, arguments)))
        return events

    def _emit(self, parsed: ParsedCall) -> list[ParseEvent]:
        if parsed.repaired:
            note_repair()
            logger.info("tool call to %s repaired", parsed.name)
        call, self._open = self._open, None
        if call is not None:  # announced already: send the rest of its arguments
            if not parsed.arguments.startswith(call.sent):
                logger.warning(
                    "tool call %d: the final arguments differ from those sent", call.index
                )
            rest = (
                parsed.arguments[len(call.sent) :] if parsed.arguments.startswith(call.sent) else ""
            )
            done = ToolCall(call.id, call.name, parsed.arguments)
            events: list[ParseEvent] = [ToolCallDelta(call.index, rest)] if rest else []
            return [*events, ToolCallEnd(call.index, done)]
        index = self._next_index()
        self._extra_calls += 1
        whole = ToolCall(new_call_id(), parsed.name, parsed.arguments)
        out: list[ParseEvent] = [ToolCallStart(index, whole.id, whole.name)]
        if parsed.arguments:
            out.append(ToolCallDelta(index, parsed.arguments))
        out.append(ToolCallEnd(index, whole))
        return out


def _as_repaired(item: RegionItem) -> RegionItem:
    if isinstance(item, ParsedCall) and not item.repaired:
        return ParsedCall(item.name, item.arguments, repaired=True)
    return item


def json_arguments(value: Any) -> str:
    """An arguments value as JSON text (a string that is JSON already is kept)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def json_args_item(name: str, text: str, *, raw: str = "") -> RegionItem:
    """A call whose arguments the model wrote as JSON ``text`` (repaired if it must be).

    Valid JSON is kept as written (up to the end of its object); repaired JSON as the
    repairer wrote it. ``raw`` is the markup
    given back as content when the arguments cannot be read."""
    name = name.strip()
    stripped = text.strip()
    if not name:
        return Unparsed(raw or text, "a call without a name")
    if not stripped:
        return ParsedCall(name, "{}")
    try:
        json.loads(stripped)
        repaired = False
    except json.JSONDecodeError:
        repaired = True
    # The same repairer streamed arguments go through, so whole and streamed agree.
    streamer = StreamingRepair()
    arguments = streamer.feed(stripped) + streamer.finish()
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        try:
            value, _ = loads_lenient(stripped)
        except Unrepairable as exc:
            return Unparsed(raw or text, f"arguments of {name}: {exc}")
        arguments = json_arguments(value)
    if not isinstance(value, dict):
        return Unparsed(raw or text, f"arguments of {name} are not an object")
    return ParsedCall(name, arguments, repaired)


def object_items(
    value: Any, raw: str, keys: tuple[str, ...] = ("arguments", "parameters")
) -> list[RegionItem]:
    """Calls from a decoded ``{"name", "arguments"}`` object or a list of them."""
    objects = value if isinstance(value, list) else [value]
    items: list[RegionItem] = []
    for obj in objects:
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return [Unparsed(raw, "not a list of {name, arguments} objects")]
        arguments: Any = next((obj[k] for k in keys if k in obj), {})
        if isinstance(arguments, str):
            try:
                arguments, _ = loads_lenient(arguments) if arguments.strip() else ({}, False)
            except Unrepairable:
                return [Unparsed(raw, f"arguments of {obj['name']} are not JSON")]
        items.append(ParsedCall(obj["name"], json_arguments(arguments)))
    return items


def json_list_items(text: str, raw: str) -> list[RegionItem]:
    """Calls from JSON text holding one call object or a list of them (repaired if needed)."""
    try:
        value, repaired = loads_lenient(text.strip())
    except Unrepairable as exc:
        return [Unparsed(raw, str(exc))]
    items = object_items(value, raw)
    return [_as_repaired(i) for i in items] if repaired else items
