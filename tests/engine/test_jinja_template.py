"""Chat templates GenAI's renderer refuses are rendered as transformers does (issue 22).

Seen: GLM-4.6 was a 400 on every request ("Expected comma in tuple"), GLM-4.7-Flash and
MiniMax-M2 whenever tools were sent. The real templates (tests/fixtures/templates, from the
llama-cpp-python source distribution) on the demo model's real GenAI tokenizer, through the
worker's ``prepare``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openvino_genai as ov_genai
import pytest

from engine.worker.jinja_template import TemplateRefused, render_template
from engine.worker.messages import GenerationRequest
from engine.worker.prepare import RequestError, prepare
from tests.conftest import ROOT

TEMPLATES = ROOT / "tests" / "fixtures" / "templates"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "天气",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {}}}
TURNS = [
    {"role": "user", "content": "weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
]


def _pipeline(tiny_model: Path) -> tuple[Any, Any]:
    pipe = ov_genai.LLMPipeline(str(tiny_model), "CPU")
    return pipe.get_tokenizer(), pipe.get_generation_config()


@pytest.mark.parametrize(
    ("name", "with_tools", "expected"),
    [
        ("GLM-4.6", False, ["[gMASK]<sop>", "<|user|>\nweather in Paris?", "<|assistant|>"]),
        ("GLM-4.6", True, ['"description": "天气"', "<tool_call>get_weather"]),
        ("GLM-4.7-Flash", True, ['"description": "天气"', "<tool_response>sunny</tool_response>"]),
        ("MiniMax-M2", True, ['"description": "天气"', '<invoke name="get_weather">']),
    ],
)
def test_a_template_genai_refuses_is_rendered_and_tokenized(
    tiny_model: Path, name: str, with_tools: bool, expected: list[str]
) -> None:
    tokenizer, config = _pipeline(tiny_model)
    tokenizer.set_chat_template((TEMPLATES / f"{name}.jinja").read_text())
    tools = TOOLS if with_tools else None
    # GenAI 2026.4 itself refuses these (were it to render one, the fallback goes unused).
    with pytest.raises(Exception):  # noqa: B017 (GenAI raises a bare RuntimeError)
        tokenizer.apply_chat_template(TURNS, add_generation_prompt=True, tools=tools)
    request = GenerationRequest(request_id=1, messages=TURNS, tools=tools, max_tokens=4)
    prepared = prepare(request, tokenizer, config, 2048)
    text = tokenizer.decode(prepared.prompt_ids, skip_special_tokens=False)
    for piece in expected:
        assert piece in text, (piece, text[:600])


def test_raise_exception_is_the_requests_400_naming_the_template(tiny_model: Path) -> None:
    tokenizer, config = _pipeline(tiny_model)
    # A conditional inside a call: GenAI cannot parse it, so the fallback runs and raises.
    template = (
        "{{ raise_exception('Conversation roles must alternate' if messages|length > 1 "
        "else 'no') }}"
    )
    tokenizer.set_chat_template(template)
    request = GenerationRequest(request_id=1, messages=TURNS, max_tokens=4)
    with pytest.raises(RequestError) as refused:
        prepare(request, tokenizer, config, 2048)
    assert refused.value.code == "invalid_request" and refused.value.param == "messages"
    assert "Conversation roles must alternate" in str(refused.value)


def test_transformers_filters_globals_and_the_generation_block() -> None:
    template = (
        "{{ bos_token }}{% for m in messages %}{% generation %}{{ m.content }}"
        "{% endgeneration %}{% endfor %}|{{ tools | tojson(ensure_ascii=True) }}"
        "|{{ tools | tojson(indent=1) | length > 0 }}|{{ strftime_now('%Y') | length }}"
        "|{% for i in range(9) %}{% if i > 1 %}{% break %}{% endif %}{{ i }}{% endfor %}"
    )
    text = render_template(
        template,
        [{"role": "user", "content": "hé"}],
        tools=[{"d": "天"}],
        special_tokens={"bos_token": "<s>"},
    )
    assert text == '<s>hé|[{"d": "\\u5929"}]|True|4|01'


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",  # the sandbox refuses internals
        "{{ messages.append(1) }}",  # immutable: a template cannot change the request
        "{% for %}",  # does not compile
        "{{ undefined_function() }}",
    ],
)
def test_a_hostile_or_broken_template_is_refused_not_run(template: str) -> None:
    with pytest.raises(TemplateRefused):
        render_template(template, [{"role": "user", "content": "hi"}])
