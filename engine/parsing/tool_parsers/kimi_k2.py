"""Kimi K2 / K2-Thinking::

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
    <|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

The call id is ``functions.NAME:INDEX``; the name is what lies between. Reasoning is the
usual ``<think>`` block. Not thread-safe: one per request.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.parsing.tool_parsers.base import (
    MarkupToolParser,
    RegionItem,
    Unparsed,
    held_back,
    json_args_item,
    split_blocks,
)
from engine.parsing.tool_parsers.formats import ToolFormat
from engine.parsing.tool_parsers.grammar import (
    THINK,
    THINK_OPENED,
    CallGrammar,
    Const,
    Function,
    Json,
    Pattern,
    Repeat,
    Seq,
    Tag,
)

CALL, CALL_END = "<|tool_call_begin|>", "<|tool_call_end|>"
ARGUMENTS = "<|tool_call_argument_begin|>"


class KimiK2ToolParser(MarkupToolParser):
    format = ToolFormat.KIMI_K2
    # The singular spelling occurs in some K2 outputs (vLLM accepts both too).
    begins = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
    ends = ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")

    def _split(self, region: str, final: bool) -> tuple[list[RegionItem], int]:
        blocks, used = split_blocks(region, CALL, CALL_END, final)
        items: list[RegionItem] = []
        for block in blocks:
            raw = CALL + block.body + (CALL_END if block.closed else "")
            call_id, found, arguments = block.body.partition(ARGUMENTS)
            if not found:
                items.append(Unparsed(raw, "a Kimi call without its arguments"))
                continue
            items.append(json_args_item(_name(call_id), arguments, raw=raw))
        return items, used

    def _open_args(self, rest: str) -> tuple[str, str] | None:
        body = rest.lstrip()
        if not body.startswith(CALL):
            return None
        call_id, found, arguments = body[len(CALL) :].partition(ARGUMENTS)
        if not found:
            return None
        return _name(call_id), _upto(arguments, (CALL_END, *self.ends))


def _name(call_id: str) -> str:
    return call_id.strip().removeprefix("functions.").rsplit(":", 1)[0]


def _upto(text: str, ends: tuple[str, ...]) -> str:
    """``text`` up to the first of ``ends``, or without a partial one at its end."""
    cut = min((at for at in (text.find(e) for e in ends) if at >= 0), default=-1)
    return text[:cut] if cut >= 0 else text[: len(text) - held_back(text, ends)]


SECTION, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"


def call_grammar(functions: Sequence[Function], single: bool) -> CallGrammar:
    """One section of calls, each ``functions.NAME:INDEX`` then its JSON arguments; the
    ``<think>`` block may come first. The section marker opens nothing else: lazy too."""
    calls = tuple(
        Tag(
            f"{CALL}functions.{f.name}:",
            Seq((Pattern("[0-9]{1,3}"), Const(ARGUMENTS), Json(f.schema_text))),
            CALL_END,
        )
        for f in functions
    )
    section = Tag(SECTION, Repeat(calls, "", single), SECTION_END)
    return CallGrammar((section,), THINK, trigger=SECTION, repeat=False, opened=THINK_OPENED)
