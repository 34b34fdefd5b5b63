"""Choosing a syntax: detection from the chat template, a parser per :class:`ToolFormat`.

The chat template (and, where the caller has them, the tokenizer's special tokens) shows the
markup a model was taught. Detection looks for each family's distinctive markers, most
specific first (``<tool_call>`` alone is Hermes; with ``<function=`` it is Qwen3-Coder, with
``<arg_key>`` GLM). A template that names none gets :data:`ToolFormat.AUTO`: a parser that
watches every family's trigger and reads the call in whichever syntax appears. No template at
all (a model without one) keeps Hermes, the most common syntax. Pure functions; the parsers
they build are one per request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from engine.parsing.tool_parsers.base import ToolCallParser, earliest, held_back
from engine.parsing.tool_parsers.deepseek import DeepSeekToolParser
from engine.parsing.tool_parsers.deepseek_dsml import DeepSeekDSMLToolParser
from engine.parsing.tool_parsers.events import ContentDelta, ParseEvent, ToolCall
from engine.parsing.tool_parsers.formats import ToolFormat
from engine.parsing.tool_parsers.gemma4 import Gemma4ToolParser
from engine.parsing.tool_parsers.glm import GLMToolParser
from engine.parsing.tool_parsers.harmony import HarmonyToolParser
from engine.parsing.tool_parsers.hermes import HermesToolCallParser
from engine.parsing.tool_parsers.json_lists import GraniteToolParser, NemotronToolParser
from engine.parsing.tool_parsers.kimi_k2 import KimiK2ToolParser
from engine.parsing.tool_parsers.llama3 import Llama3ToolCallParser
from engine.parsing.tool_parsers.minimax_m2 import MiniMaxM2ToolParser
from engine.parsing.tool_parsers.mistral import MistralToolCallParser
from engine.parsing.tool_parsers.qwen3_xml import Qwen3XMLToolParser
from engine.parsing.tool_parsers.seed_oss import SeedOSSToolParser
from engine.parsing.tool_parsers.values import ToolSchemas, tool_schemas

logger = logging.getLogger(__name__)

ParserFactory = Callable[[ToolSchemas | None], ToolCallParser]

PARSERS: dict[ToolFormat, ParserFactory] = {
    ToolFormat.HERMES: HermesToolCallParser,
    ToolFormat.LLAMA3: Llama3ToolCallParser,
    ToolFormat.MISTRAL: MistralToolCallParser,
    ToolFormat.HARMONY: HarmonyToolParser,
    ToolFormat.QWEN3_XML: Qwen3XMLToolParser,
    ToolFormat.DEEPSEEK: DeepSeekToolParser,
    ToolFormat.DEEPSEEK_DSML: DeepSeekDSMLToolParser,
    ToolFormat.GEMMA4: Gemma4ToolParser,
    ToolFormat.KIMI_K2: KimiK2ToolParser,
    ToolFormat.NEMOTRON: NemotronToolParser,
    ToolFormat.GRANITE: GraniteToolParser,
    ToolFormat.SEED_OSS: SeedOSSToolParser,
    ToolFormat.GLM: GLMToolParser,
    ToolFormat.MINIMAX_M2: MiniMaxM2ToolParser,
}

# Each family's distinctive template markers, most specific first: every marker of a row
# must occur (``all``), any row of a family will do.
_DETECT: tuple[tuple[ToolFormat, tuple[str, ...]], ...] = (
    (ToolFormat.HARMONY, ("<|channel|>", "<|message|>")),
    (ToolFormat.DEEPSEEK_DSML, ("｜DSML｜",)),
    (ToolFormat.DEEPSEEK, ("tool▁calls▁begin",)),
    (ToolFormat.DEEPSEEK, ("tool▁call▁begin",)),
    (ToolFormat.KIMI_K2, ("<|tool_calls_section_begin|>",)),
    (ToolFormat.KIMI_K2, ("<|tool_call_section_begin|>",)),
    (ToolFormat.GEMMA4, ("<|tool_call>",)),
    (ToolFormat.MINIMAX_M2, ("<minimax:tool_call>",)),
    (ToolFormat.SEED_OSS, ("<seed:tool_call>",)),
    (ToolFormat.GLM, ("<tool_call>", "<arg_key>")),
    (ToolFormat.QWEN3_XML, ("<tool_call>", "<function=")),
    (ToolFormat.QWEN3_XML, ("<tool_call>", "<parameter=")),
    (ToolFormat.HERMES, ("<tool_call>",)),
    (ToolFormat.NEMOTRON, ("<TOOLCALL>",)),
    (ToolFormat.GRANITE, ("<|tool_call|>",)),
    (ToolFormat.MISTRAL, ("[TOOL_CALLS]",)),
    (ToolFormat.LLAMA3, ("<|python_tag|>",)),
    (ToolFormat.LLAMA3, ("<|start_header_id|>", "parameters")),
)


def tool_format_for_template(
    template: str | None, special_tokens: Iterable[str] = ()
) -> ToolFormat:
    """The tool-call syntax a chat template (and its tokenizer's special tokens) teaches.

    No template: Hermes. A template showing no known syntax: :data:`ToolFormat.AUTO`."""
    tokens = "\n".join(special_tokens)
    if not template and not tokens:
        return ToolFormat.HERMES
    text = (template or "") + "\n" + tokens
    for fmt, markers in _DETECT:
        if all(marker in text for marker in markers):
            return fmt
    return ToolFormat.AUTO


def new_tool_call_parser(
    fmt: ToolFormat | str, tools: Sequence[Mapping[str, Any]] | None = None
) -> ToolCallParser:
    """A fresh parser for one reply in syntax ``fmt``.

    ``tools`` (the request's OpenAI tool definitions, optional) type XML-style parameter
    values by each tool's JSON schema. Raises ``ValueError`` for an unknown format name."""
    try:
        kind = ToolFormat(fmt)
    except ValueError:
        raise ValueError(f"unknown tool-call format {fmt!r}") from None
    schemas = tool_schemas(tools) if tools else None
    if kind is ToolFormat.AUTO:
        return AutoToolParser(schemas)
    return PARSERS[kind](schemas)


def parse_tool_calls(
    fmt: ToolFormat | str, text: str, tools: Sequence[Mapping[str, Any]] | None = None
) -> tuple[str, list[ToolCall]]:
    """Parse a whole reply at once: (content, calls)."""
    parser = new_tool_call_parser(fmt, tools)
    events = parser.feed(text) + parser.finish()
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    return content, parser.calls


# ---- the fallback: every trigger watched -------------------------------------------------

_TRIGGERS: dict[str, ToolFormat | None] = {
    "<tool_call>": None,  # Hermes, Qwen3-Coder or GLM: told apart by what follows
    "[TOOL_CALLS]": ToolFormat.MISTRAL,
    "<|python_tag|>": ToolFormat.LLAMA3,
    "to=functions.": ToolFormat.HARMONY,
    "<｜tool▁calls▁begin｜>": ToolFormat.DEEPSEEK,
    "<｜tool▁call▁begin｜>": ToolFormat.DEEPSEEK,
    "<｜DSML｜function_calls>": ToolFormat.DEEPSEEK_DSML,
    "<|tool_call>": ToolFormat.GEMMA4,
    "<|tool_calls_section_begin|>": ToolFormat.KIMI_K2,
    "<|tool_call_section_begin|>": ToolFormat.KIMI_K2,
    "<TOOLCALL>": ToolFormat.NEMOTRON,
    "<|tool_call|>": ToolFormat.GRANITE,
    "<seed:tool_call>": ToolFormat.SEED_OSS,
    "<minimax:tool_call>": ToolFormat.MINIMAX_M2,
}


def _tool_call_family(after: str) -> ToolFormat | None:
    """Which ``<tool_call>`` family ``after`` (the text after the tag) is, once it shows."""
    body = after.lstrip()
    if not body:
        return None
    if body.startswith("{"):
        return ToolFormat.HERMES
    if body.startswith("<"):
        if len(body) < len("<function="):
            return None
        return ToolFormat.QWEN3_XML if body.startswith("<function=") else ToolFormat.HERMES
    return ToolFormat.GLM


class AutoToolParser(ToolCallParser):
    """For a template that shows no syntax: content until any family's trigger, then that
    family's parser for the rest of the reply. Not thread-safe: one per request."""

    format = ToolFormat.AUTO

    def __init__(self, tools: ToolSchemas | None = None) -> None:
        super().__init__(tools)
        self._buffer = ""
        self._inner: ToolCallParser | None = None

    def feed(self, text: str) -> list[ParseEvent]:
        if self._inner is not None:
            return self._track(self._inner.feed(text))
        self._buffer += text
        return self._track(self._choose(final=False))

    def finish(self) -> list[ParseEvent]:
        events: list[ParseEvent] = []
        if self._inner is None:
            events.extend(self._choose(final=True))
        if self._inner is not None:
            return self._track(events + self._inner.finish())
        events.extend(self._content(self._buffer))
        self._buffer = ""
        events.extend(self._flush_ws())
        return self._track(events)

    def _choose(self, *, final: bool) -> list[ParseEvent]:
        at, trigger = earliest(self._buffer, tuple(_TRIGGERS))
        if trigger is None:
            cut = len(self._buffer) - (0 if final else held_back(self._buffer, tuple(_TRIGGERS)))
            events = self._content(self._buffer[:cut])
            self._buffer = self._buffer[cut:]
            return events
        fmt = _TRIGGERS[trigger] or _tool_call_family(self._buffer[at + len(trigger) :])
        if fmt is None and not final:
            events = self._content(self._buffer[:at])
            self._buffer = self._buffer[at:]
            return events
        events = self._content(self._buffer[:at])
        self._held_ws = ""
        logger.info("tool calls read as %s (the template shows no syntax)", fmt or "hermes")
        self._inner = PARSERS[fmt or ToolFormat.HERMES](self._schemas)
        rest, self._buffer = self._buffer[at:], ""
        return events + self._inner.feed(rest)  # (tracked by the caller)
