"""Every family's call grammar compiles in GenAI, forced and lazy, for the schemas tools use.

The planner builds the grammar from the family's real chat template
(``tests/fixtures/templates``); the worker converts it to GenAI's structural tags
(``engine.worker.prepare.structured_config``) and the grammar probe's one-token run on the
demo model compiles it (``engine.worker.grammar_probe.compile_once``), as for a request.
The tool mixes required and optional parameters of every type a call grammar writes
differently (text, enum, integer, boolean, an array as JSON): GenAI refuses some empty
elements (an empty ``ConstString`` or ``Regex``), which only optional parameters produce.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.server.pipeline.plan import plan_request
from engine.server.pipeline.request import GenerateRequest, ToolChoice
from engine.worker.grammar_probe import compile_once, probe_pipeline
from engine.worker.prepare import structured_config

TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "templates"
FAMILY_TEMPLATES = (
    "openai-gpt-oss-120b",
    "Qwen3-Coder",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
    "google-gemma-4-31B-it",
    "Kimi-K2-Instruct",
    "GLM-4.6",
    "deepseek-ai-DeepSeek-V3.2",
    "ByteDance-Seed-OSS",
    "MiniMax-M2",
)
# JSON-list families: a forced call is the one-object syntax (no structure); ``auto`` holds
# the whole list from the marker on (engine.parsing.tool_parsers.json_lists.lazy_grammar).
LIST_TEMPLATES = ("NVIDIA-Nemotron-Nano-v2", "ibm-granite-granite-3.3-2B-Instruct")
FLAT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "days": {"type": "integer"},
        "exact": {"type": "boolean"},
    },
    "required": ["query"],
}
WITH_LIST: dict[str, Any] = {
    **FLAT,
    "properties": {**FLAT["properties"], "tags": {"type": "array", "items": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def pipe(tiny_model: Path) -> Iterator[Any]:
    yield probe_pipeline(tiny_model)


def _tools(parameters: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": name, "parameters": parameters}}
        for name in ("search", "lookup")
    ]


_REQUIRED, _AUTO = ToolChoice("required"), ToolChoice("auto")
_CASES = [
    *(pytest.param(t, c, id=f"{t}-{c.mode}") for t in FAMILY_TEMPLATES for c in (_REQUIRED, _AUTO)),
    *(pytest.param(t, _AUTO, id=f"{t}-auto") for t in LIST_TEMPLATES),
]


@pytest.mark.parametrize(("template", "choice"), _CASES)
def test_the_family_grammar_compiles(
    pipe: Any, tiny_model: Path, template: str, choice: ToolChoice
) -> None:
    text = (TEMPLATES / f"{template}.jinja").read_text(encoding="utf-8")
    # Gemma 4's notation has no arrays yet: its grammar takes the flat tool.
    parameters = FLAT if "gemma" in template else WITH_LIST
    request = GenerateRequest(
        model="m",
        dialect="openai",
        messages=[{"role": "user", "content": "Hello"}],
        tools=_tools(parameters),
        tool_choice=choice,
    )
    constraint = plan_request(request, text).constraint
    assert constraint is not None and constraint.structure is not None
    variants = [constraint, constraint.for_prompt(opens_reasoning=True)]
    for variant in variants:
        error = compile_once(pipe, structured_config(variant).config)
        if error is not None:  # a failed compile leaves the pipeline unusable
            pipe = probe_pipeline(tiny_model)
        assert error is None, (template, choice, error)
