"""DeepSeek V3 / V3.1 / R1 and the R1 distills (fullwidth bars U+FF5C, ``▁`` U+2581).

V3.1 writes ``NAME<｜tool▁sep｜>{json}``; V3-0324, R1 and the R1 distills write
``function<｜tool▁sep｜>NAME`` then the arguments in a ```` ```json ```` fence::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Paris"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

Both are read; a reply that starts a call without the section marker is read too. Not
thread-safe: one per request.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.parsing.tool_parsers.base import (
    MarkupToolParser,
    RegionItem,
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
    OneOf,
    Repeat,
    Seq,
    Tag,
)
from engine.parsing.tool_parsers.kimi_k2 import _upto

BEGIN, END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL, CALL_END = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"


class DeepSeekToolParser(MarkupToolParser):
    format = ToolFormat.DEEPSEEK
    begins = (BEGIN, CALL)
    ends = (END,)
    keep_begin = (CALL,)

    def _split(self, region: str, final: bool) -> tuple[list[RegionItem], int]:
        blocks, used = split_blocks(region, CALL, CALL_END, final)
        items: list[RegionItem] = []
        for block in blocks:
            raw = CALL + block.body + (CALL_END if block.closed else "")
            left, _, right = block.body.partition(SEP)
            if left.strip() == "function":
                name, _, arguments = right.partition("\n")
                arguments = _unfenced(arguments)
            else:
                name, arguments = left, right
            items.append(json_args_item(name, arguments, raw=raw))
        return items, used

    def _open_args(self, rest: str) -> tuple[str, str] | None:
        body = rest.lstrip()
        if not body.startswith(CALL):
            return None
        left, found, right = body[len(CALL) :].partition(SEP)
        if not found:
            return None
        ends = (CALL_END, *self.ends)
        if left.strip() != "function":
            return left, _upto(right, ends)
        name, newline, arguments = right.partition("\n")
        if not newline:
            return None
        arguments = arguments.lstrip()
        if not arguments.startswith(FENCE):
            return None if FENCE.startswith(arguments) else (name, _upto(arguments, ends))
        return name, _upto(arguments[len(FENCE) :], ("```", *ends))


FENCE = "```json"


def _unfenced(text: str) -> str:
    body = text.strip()
    if body.startswith("```"):
        body = body[3:].removeprefix("json")
    return body.removesuffix("```").strip()


def call_grammar(functions: Sequence[Function], single: bool) -> CallGrammar:
    """One section of calls in either spelling (R1 and V3's ``function<sep>NAME`` and a
    fenced JSON, V3.1's ``NAME<sep>JSON``), after the reasoning the generation prompt opens
    (``<think>``, closed by ``</think>``). The section marker opens nothing else: lazy too."""
    calls = tuple(
        Tag(
            CALL,
            OneOf(
                (
                    Seq(
                        (
                            Const(f"function{SEP}{f.name}\n{FENCE}\n"),
                            Json(f.schema_text),
                            Const("\n```"),
                        )
                    ),
                    Seq((Const(f"{f.name}{SEP}"), Json(f.schema_text))),
                )
            ),
            CALL_END,
        )
        for f in functions
    )
    section = Tag(BEGIN, Repeat(calls, "\n", single), END)
    return CallGrammar((section,), THINK, trigger=BEGIN, repeat=False, opened=THINK_OPENED)
