"""gpt-oss harmony tool calls.

On the wire a call is a message to a recipient::

    <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>

(the recipient may also stand before ``<|channel|>``). The reasoning side
(:mod:`engine.parsing.reasoning_parsers.harmony`) routes the channels first: ``analysis`` is
reasoning, ``final`` content, and a message with a ``functions.`` recipient is passed on as
``to=functions.NAME<|message|>ARGS<|call|>``, which this parser reads (it reads the raw form
too). Not thread-safe: one per request.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.parsing.tool_parsers.base import MarkupToolParser, RegionItem, Unparsed, json_args_item
from engine.parsing.tool_parsers.formats import ToolFormat
from engine.parsing.tool_parsers.grammar import CallGrammar, Function, Json, Tag, Text
from engine.parsing.tool_parsers.kimi_k2 import _upto

RECIPIENT = "to=functions."
MESSAGE = "<|message|>"
CALL_END = "<|call|>"


class HarmonyToolParser(MarkupToolParser):
    format = ToolFormat.HARMONY
    begins = (RECIPIENT,)
    ends = (CALL_END,)
    end_optional = True  # <|call|> is a stop token: the engine may have stripped it

    def _split(self, region: str, final: bool) -> tuple[list[RegionItem], int]:
        if not final:
            return [], 0
        raw = RECIPIENT + region
        header, found, arguments = region.partition(MESSAGE)
        if not found:
            return [Unparsed(raw, "a harmony call without a message")], len(region)
        words = header.split("<|", 1)[0].split()
        name = words[0] if words else ""
        return [json_args_item(name, arguments, raw=raw)], len(region)

    def _open_args(self, rest: str) -> tuple[str, str] | None:
        header, found, arguments = rest.partition(MESSAGE)
        if not found:
            return None
        words = header.split("<|", 1)[0].split()
        return (words[0] if words else ""), _upto(arguments, self.ends)


CALL_HEAD = "<|channel|>commentary " + RECIPIENT
ANALYSIS = Tag("<|channel|>analysis<|message|>", Text(), "<|end|><|start|>assistant")


def call_grammar(functions: Sequence[Function], single: bool) -> CallGrammar:
    """The analysis channel (optional), then one commentary message to a function whose
    body is its JSON arguments. The message's ``<|call|>`` is a stop token: it ends the
    reply (and the grammar needs nothing after the JSON), so harmony writes one call per
    reply however ``single`` is set. Lazy on ``<|channel|>commentary to=functions.``,
    which starts nothing but a call."""
    del single  # one call per reply: <|call|> ends it
    calls = tuple(
        Tag(f"{CALL_HEAD}{f.name} <|constrain|>json{MESSAGE}", Json(f.schema_text), "")
        for f in functions
    )
    return CallGrammar(calls, ANALYSIS, trigger=CALL_HEAD, repeat=False)
