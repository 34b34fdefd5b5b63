"""Constraining a call (``tool_choice`` forced, or ``"auto"`` once a call opens).

The families whose call is one ``{"name", "arguments"}`` JSON object between fixed markers
have a :class:`CallSyntax` (what the grammar writes around the JSON). The others (harmony,
DeepSeek, DeepSeek V3.2 DSML, Kimi K2, GLM, Gemma 4, Qwen3-Coder XML, Seed-OSS, MiniMax-M2)
build a :class:`~engine.parsing.tool_parsers.grammar.CallGrammar` in their own module's
``call_grammar``; :func:`family_grammar` picks it, or says why a family stays unconstrained
(:class:`~engine.parsing.tool_parsers.grammar.Unconstrained`). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.parsing.tool_parsers import (
    deepseek,
    deepseek_dsml,
    gemma4,
    glm,
    harmony,
    kimi_k2,
    minimax_m2,
    qwen3_xml,
    seed_oss,
)
from engine.parsing.tool_parsers.formats import ToolFormat
from engine.parsing.tool_parsers.grammar import (
    CallGrammar,
    GrammarBuilder,
    Unconstrained,
    functions_of,
)


@dataclass(frozen=True)
class CallSyntax:
    """How one call is written in a syntax: what the grammar must produce around the JSON."""

    begin: str
    end: str
    arguments_key: str


CALL_SYNTAX: dict[ToolFormat, CallSyntax] = {
    ToolFormat.HERMES: CallSyntax("<tool_call>\n", "\n</tool_call>", "arguments"),
    ToolFormat.LLAMA3: CallSyntax("", "", "parameters"),
    ToolFormat.MISTRAL: CallSyntax("[TOOL_CALLS][", "]", "arguments"),
    ToolFormat.NEMOTRON: CallSyntax("<TOOLCALL>[", "]</TOOLCALL>", "arguments"),
    ToolFormat.GRANITE: CallSyntax("<|tool_call|>[", "]", "arguments"),
    # No syntax in the template: a forced call is written the Hermes way (AUTO reads it).
    ToolFormat.AUTO: CallSyntax("<tool_call>\n", "\n</tool_call>", "arguments"),
}


def call_syntax(fmt: ToolFormat | str) -> CallSyntax | None:
    """How a forced call is written in ``fmt``, or ``None`` when it cannot be constrained."""
    return CALL_SYNTAX.get(ToolFormat(fmt))


def call_schema(
    fmt: ToolFormat | str, tools: list[dict[str, Any]], name: str | None = None
) -> dict[str, Any]:
    """JSON schema of one call object to any of ``tools`` (or only to the one named).

    ``tools`` are OpenAI tool definitions (``{"type": "function", "function": {...}}``).
    """
    syntax = call_syntax(fmt)
    if syntax is None:
        raise ValueError(f"calls in the {fmt} syntax cannot be constrained")
    key = syntax.arguments_key
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


# Each family's own call grammar (see its module's ``call_grammar``).
CALL_GRAMMARS: dict[ToolFormat, GrammarBuilder] = {
    ToolFormat.HARMONY: harmony.call_grammar,
    ToolFormat.DEEPSEEK: deepseek.call_grammar,
    ToolFormat.KIMI_K2: kimi_k2.call_grammar,
    ToolFormat.GLM: glm.call_grammar,
    ToolFormat.GEMMA4: gemma4.call_grammar,
    ToolFormat.QWEN3_XML: qwen3_xml.call_grammar,
    ToolFormat.DEEPSEEK_DSML: deepseek_dsml.call_grammar,
    ToolFormat.SEED_OSS: seed_oss.call_grammar,
    ToolFormat.MINIMAX_M2: minimax_m2.call_grammar,
}


def family_grammar(
    fmt: ToolFormat | str,
    tools: list[dict[str, Any]],
    name: str | None,
    single: bool,
    builder: GrammarBuilder | None = None,
) -> CallGrammar | Unconstrained:
    """``fmt``'s call grammar over ``tools`` (only ``name``'s, if set), or why there is none.
    ``builder`` stands in for the family's own (a template's other form of the family's
    calls: Mistral's ``name[ARGS]{...}``).

    Raises:
        ValueError: ``name`` is no tool's name (or there are no tools).
    """
    functions = functions_of(tools, name)
    if not functions:
        raise ValueError(f"no tool named {name!r}" if name else "no tools")
    builder = builder or CALL_GRAMMARS.get(ToolFormat(fmt))
    if builder is None:
        return Unconstrained.NO_GRAMMAR
    return builder(functions, single)
