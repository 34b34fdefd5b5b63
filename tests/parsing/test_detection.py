"""Each family's syntax is detected from its real chat template (tests/fixtures/templates,
copied from llama.cpp's models/templates) and from special tokens alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.parsing import (
    ReasoningFormat,
    ToolFormat,
    reasoning_format_for_template,
    template_supports_reasoning,
    tool_format_for_template,
)

TEMPLATES = Path(__file__).parent.parent / "fixtures" / "templates"


def template(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("openai-gpt-oss-120b", ToolFormat.HARMONY),
        ("Qwen3-Coder", ToolFormat.QWEN3_XML),
        ("Qwen3.5-4B", ToolFormat.QWEN3_XML),
        ("Qwen-Qwen3-0.6B", ToolFormat.HERMES),
        ("deepseek-ai-DeepSeek-V3.1", ToolFormat.DEEPSEEK),
        ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", ToolFormat.DEEPSEEK),
        ("deepseek-ai-DeepSeek-V3.2", ToolFormat.DEEPSEEK_DSML),
        ("google-gemma-4-31B-it", ToolFormat.GEMMA4),
        ("Kimi-K2-Instruct", ToolFormat.KIMI_K2),
        ("NVIDIA-Nemotron-Nano-v2", ToolFormat.NEMOTRON),
        ("ibm-granite-granite-3.3-2B-Instruct", ToolFormat.GRANITE),
        ("ByteDance-Seed-OSS", ToolFormat.SEED_OSS),
        ("GLM-4.6", ToolFormat.GLM),
        ("GLM-4.7-Flash", ToolFormat.GLM),
        ("MiniMax-M2", ToolFormat.MINIMAX_M2),
        ("mistralai-Ministral-3-14B-Reasoning-2512", ToolFormat.MISTRAL),
        ("Mistral-Small-3.2-24B-Instruct-2506", ToolFormat.MISTRAL),
        ("meta-llama-Llama-3.1-8B-Instruct", ToolFormat.LLAMA3),
        # SmolLM3's template shows no call syntax: every syntax is tried.
        ("HuggingFaceTB-SmolLM3-3B", ToolFormat.AUTO),
    ],
)
def test_tool_format_from_real_template(name: str, fmt: ToolFormat) -> None:
    assert tool_format_for_template(template(name)) is fmt


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("openai-gpt-oss-120b", ReasoningFormat.HARMONY),
        ("google-gemma-4-31B-it", ReasoningFormat.GEMMA4),
        ("ByteDance-Seed-OSS", ReasoningFormat.SEED_OSS),
        ("mistralai-Ministral-3-14B-Reasoning-2512", ReasoningFormat.MISTRAL),
        ("Qwen-Qwen3-0.6B", ReasoningFormat.THINK),
        ("Kimi-K2-Instruct", ReasoningFormat.THINK),
    ],
)
def test_reasoning_format_from_real_template(name: str, fmt: ReasoningFormat) -> None:
    text = template(name)
    assert reasoning_format_for_template(text) is fmt
    if fmt is not ReasoningFormat.THINK:
        assert template_supports_reasoning(text)


def test_special_tokens_alone_tell_the_family() -> None:
    assert tool_format_for_template(None, ["<|tool_calls_section_begin|>"]) is ToolFormat.KIMI_K2
    assert tool_format_for_template("", ["<seed:tool_call>"]) is ToolFormat.SEED_OSS
    assert tool_format_for_template("{{ messages }}", ["<|tool_call>"]) is ToolFormat.GEMMA4
    assert tool_format_for_template("{{ messages }}") is ToolFormat.AUTO
    assert tool_format_for_template(None) is ToolFormat.HERMES
