"""The tool-call syntaxes Sidelight reads, as one typed name each.

A :class:`ToolFormat` is what :func:`~engine.parsing.tool_parsers.registry.tool_format_for_template`
detects and what :func:`~engine.parsing.tool_parsers.registry.new_tool_call_parser` builds a
parser for. It is a ``str`` enum so the names stay what they were (``"hermes"``...) in logs and
old call sites. Pure data; no threads.
"""

from __future__ import annotations

from enum import Enum


class ToolFormat(str, Enum):
    """One family's tool-call markup (see the module of the same name for the wire form)."""

    HERMES = "hermes"  # <tool_call>{json}</tool_call>: Qwen2.5/Qwen3, Hermes, SmolLM3
    LLAMA3 = "llama3"  # the reply is {"name", "parameters"}: Llama 3.1-3.3
    MISTRAL = "mistral"  # [TOOL_CALLS]...: Mistral, Devstral, Ministral
    HARMONY = "harmony"  # gpt-oss: <|channel|>commentary to=functions.NAME ...
    QWEN3_XML = "qwen3_xml"  # Qwen3-Coder, Qwen3.5: <tool_call><function=NAME><parameter=P>
    DEEPSEEK = "deepseek"  # DeepSeek V3/V3.1/R1: <｜tool▁calls▁begin｜>...
    DEEPSEEK_DSML = "deepseek_dsml"  # DeepSeek V3.2: <｜DSML｜function_calls>...
    GEMMA4 = "gemma4"  # <|tool_call>call:NAME{k:<|"|>v<|"|>}<tool_call|>
    KIMI_K2 = "kimi_k2"  # <|tool_calls_section_begin|>...functions.NAME:0...
    NEMOTRON = "nemotron"  # Nemotron Nano v2: <TOOLCALL>[...]</TOOLCALL>
    GRANITE = "granite"  # Granite 3.x: <|tool_call|>[...]
    SEED_OSS = "seed_oss"  # <seed:tool_call><function=NAME>...</seed:tool_call>
    GLM = "glm"  # GLM 4.5-4.7: <tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value>
    MINIMAX_M2 = "minimax_m2"  # <minimax:tool_call><invoke name="NAME"><parameter name="P">
    AUTO = "auto"  # the template shows no known syntax: every syntax's trigger is watched

    def __str__(self) -> str:
        return self.value
