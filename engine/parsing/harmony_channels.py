"""gpt-oss harmony: a reply is a run of messages on channels; route each one.

After the generation prompt ``<|start|>assistant`` the model writes messages like::

    <|channel|>analysis<|message|>The user asks...<|end|>
    <|start|>assistant<|channel|>final<|message|>Paris.<|return|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>

(the recipient ``to=functions.NAME`` may also stand before ``<|channel|>``). ``analysis`` is
reasoning; ``final`` and a commentary preamble are content; a message to a ``functions.``
recipient is passed on as content in one canonical form,
``to=functions.NAME<|message|>ARGS<|call|>``, for the harmony tool parser
(:mod:`engine.parsing.tool_parsers.harmony`). Headers never reach content, so a plain answer
comes back without markup. A reply that does not start with harmony markup is content as
written. Not thread-safe: one splitter per request.
"""

from __future__ import annotations

import logging
import re
from typing import Literal

from engine.parsing.reasoning import ReasoningDelta
from engine.parsing.tool_parsers.base import earliest, held_back

logger = logging.getLogger(__name__)

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
CALL = "<|call|>"
_BODY_ENDS = ("<|end|>", "<|return|>", CALL, START)
_RECIPIENT = re.compile(r"to=(\S+?)(?=\s|<\||$)")
_CHANNEL_NAME = re.compile(r"<\|channel\|>\s*(\w+)")

Route = Literal["reasoning", "content", "call"]
State = Literal["start", "header", "body", "plain"]


class HarmonySplitter:
    """Splits a harmony reply into reasoning and content (calls passed on canonically)."""

    def __init__(self) -> None:
        self._state: State = "start"
        self._route: Route = "content"
        self._buffer = ""

    @property
    def in_reasoning(self) -> bool:
        return self._state == "body" and self._route == "reasoning"

    def feed(self, text: str) -> ReasoningDelta:
        self._buffer += text
        reasoning: list[str] = []
        content: list[str] = []
        while self._step(reasoning, content, final=False):
            pass
        return ReasoningDelta("".join(reasoning), "".join(content))

    def finish(self) -> ReasoningDelta:
        reasoning: list[str] = []
        content: list[str] = []
        while self._step(reasoning, content, final=True):
            pass
        rest, self._buffer = self._buffer, ""
        if rest.strip() and self._state in ("start", "header"):
            if "<|" not in rest and "to=" not in rest:
                content.append(rest)  # a bare "<" is text, not a header
            else:
                logger.info("harmony header left unfinished at the reply's end: %r", rest[:80])
        return ReasoningDelta("".join(reasoning), "".join(content))

    def _step(self, reasoning: list[str], content: list[str], *, final: bool) -> bool:
        """Advance once; ``False`` when more text is needed (or, at the end, nothing is left)."""
        if self._state == "plain":
            content.append(self._buffer)
            self._buffer = ""
            return False
        if self._state in ("start", "header"):
            return self._header(content, final=final)
        return self._body(reasoning, content, final=final)

    def _header(self, content: list[str], *, final: bool) -> bool:
        if self._state == "start":
            stripped = self._buffer.lstrip()
            if not stripped:
                return False
            if not stripped.startswith(("<|", "to=")) and not _could_start(stripped):
                self._state = "plain"  # not harmony: the reply is content as written
                return True
            if _could_start(stripped) and not final:
                return False
            self._state = "header"
        at = self._buffer.find(MESSAGE)
        if at < 0:
            return False
        header, self._buffer = self._buffer[:at], self._buffer[at + len(MESSAGE) :]
        recipient = _RECIPIENT.search(header)
        channel = _CHANNEL_NAME.search(header)
        if recipient and recipient[1].startswith("functions."):
            self._route = "call"
            content.append(f"to={recipient[1]}{MESSAGE}")
        elif channel and channel[1] == "analysis":
            self._route = "reasoning"
        else:
            self._route = "content"
        self._state = "body"
        return True

    def _body(self, reasoning: list[str], content: list[str], *, final: bool) -> bool:
        sink = reasoning if self._route == "reasoning" else content
        at, end = earliest(self._buffer, _BODY_ENDS)
        if end is None:
            cut = (
                len(self._buffer)
                if final
                else len(self._buffer) - held_back(self._buffer, _BODY_ENDS)
            )
            sink.append(self._buffer[:cut])
            self._buffer = self._buffer[cut:]
            return False
        sink.append(self._buffer[:at])
        if self._route == "call":
            content.append(CALL)
        self._buffer = self._buffer[at + (0 if end == START else len(end)) :]
        self._state = "header"
        return True


def _could_start(text: str) -> bool:
    """Whether ``text`` is still the beginning of a harmony marker (hold it back)."""
    return any(marker.startswith(text) and marker != text for marker in (START, CHANNEL, "to="))
