"""Each family's native markup, read whole, char by char and cut in two at every position.

The strings are written the way each family's real chat template writes calls (see
tests/fixtures/templates): several calls per reply, content around them, reasoning apart.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine.parsing import ReasoningFormat, ToolFormat, parse_tool_calls
from tests.parsing.family_check import check

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "metric": {"type": "boolean"},
                    "where": {"type": "object"},
                    "zip": {"type": "string"},
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
        },
    },
]
WEATHER = ("get_weather", {"city": "Paris", "days": 3})
TIME = ("get_time", {"tz": "CET"})


def test_harmony_reasoning_calls_and_no_markup() -> None:
    text = (
        "<|channel|>analysis<|message|>Need the weather and the time.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Paris", "days": 3}<|call|>'
        "<|start|>assistant to=functions.get_time<|channel|>commentary json"
        '<|message|>{"tz": "CET"}<|call|>'
    )
    fmt = {"tool_format": ToolFormat.HARMONY, "reasoning_format": ReasoningFormat.HARMONY}
    check(text, calls=[WEATHER, TIME], reasoning="Need the weather and the time.", **fmt)
    # The engine strips the stop token <|call|>: the call still reads.
    reasoning = "Need the weather and the time."
    check(text.removesuffix("<|call|>"), calls=[WEATHER, TIME], reasoning=reasoning, **fmt)


def test_harmony_plain_answer_comes_back_without_markup() -> None:
    text = (
        "<|channel|>analysis<|message|>Easy.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>The capital is Paris.<|return|>"
    )
    for tools in (ToolFormat.HARMONY, None):
        check(
            text,
            calls=[],
            content="The capital is Paris.",
            reasoning="Easy.",
            tool_format=tools,
            reasoning_format=ReasoningFormat.HARMONY,
        )
    check("Just text.", calls=[], content="Just text.", reasoning_format=ReasoningFormat.HARMONY)


def test_qwen3_coder_xml_typed_by_schema() -> None:
    text = (
        "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n"
        "<parameter=zip>\n75001\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=get_time>\n<parameter=tz>\nCET\n</parameter>\n</function>\n"
        "</tool_call>"
    )
    weather = ("get_weather", {"city": "Paris", "days": 3, "metric": True, "zip": "75001"})
    check(
        text,
        calls=[weather, TIME],
        content="Checking.",
        tool_format=ToolFormat.QWEN3_XML,
        tools=TOOLS,
    )
    # Without schemas values stay text (objects excepted).
    _, calls = parse_tool_calls(ToolFormat.QWEN3_XML, text)
    assert calls[0].arguments_object()["days"] == "3"


def test_qwen3_coder_json_object_value_and_multiline_string() -> None:
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=where>\n"
        '{"lat": 48.8, "tags": ["a", "b"]}\n</parameter>\n'
        "<parameter=city>\nline one\nline two\n</parameter>\n</function>\n</tool_call>"
    )
    expected = (
        "get_weather",
        {"where": {"lat": 48.8, "tags": ["a", "b"]}, "city": "line one\nline two"},
    )
    check(text, calls=[expected], tool_format=ToolFormat.QWEN3_XML, tools=TOOLS)


def test_deepseek_v31_and_r1_forms() -> None:
    v31 = (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
        '{"city": "Paris", "days": 3}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time'
        '<｜tool▁sep｜>{"tz": "CET"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    )
    check(v31, calls=[WEATHER, TIME], tool_format=ToolFormat.DEEPSEEK)
    r1 = (
        "Let me look.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
        '```json\n{"city": "Paris", "days": 3}\n```<｜tool▁call▁end｜>\n'
        "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n"
        '```json\n{"tz": "CET"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    )
    check(r1, calls=[WEATHER, TIME], content="Let me look.", tool_format=ToolFormat.DEEPSEEK)
    # R1 distills think first (the prompt opens <think>).
    check(
        "I should call it.\n</think>\n\n" + r1,
        calls=[WEATHER, TIME],
        content="Let me look.",
        reasoning="I should call it.",
        tool_format=ToolFormat.DEEPSEEK,
        starts_in_reasoning=True,
    )


def test_deepseek_v32_dsml() -> None:
    text = (
        '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="zip" string="true">75001</｜DSML｜parameter>\n'
        '</｜DSML｜invoke>\n<｜DSML｜invoke name="get_time">\n'
        '<｜DSML｜parameter name="tz" string="true">CET</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n</｜DSML｜function_calls>"
    )
    weather = ("get_weather", {"city": "Paris", "days": 3, "zip": "75001"})
    check(text, calls=[weather, TIME], tool_format=ToolFormat.DEEPSEEK_DSML)


def test_gemma4_calls_and_thought_channel() -> None:
    text = (
        "<|channel>thought\nThe user wants weather.<channel|>"
        '<|tool_call>call:get_weather{city:<|"|>Paris, "FR"<|"|>,days:3,metric:true,'
        'where:{tags:[<|"|>a<|"|>,1]}}<tool_call|>'
        '<|tool_call>call:get_time{tz:<|"|>CET<|"|>}<tool_call|>'
    )
    weather = (
        "get_weather",
        {"city": 'Paris, "FR"', "days": 3, "metric": True, "where": {"tags": ["a", 1]}},
    )
    check(
        text,
        calls=[weather, TIME],
        reasoning="The user wants weather.",
        tool_format=ToolFormat.GEMMA4,
        reasoning_format=ReasoningFormat.GEMMA4,
    )


def test_kimi_k2() -> None:
    text = (
        "<think>Two calls.</think>Sure.<|tool_calls_section_begin|><|tool_call_begin|>"
        'functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris", "days": 3}'
        "<|tool_call_end|><|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>"
        '{"tz": "CET"}<|tool_call_end|><|tool_calls_section_end|>'
    )
    check(
        text,
        calls=[WEATHER, TIME],
        content="Sure.",
        reasoning="Two calls.",
        tool_format=ToolFormat.KIMI_K2,
    )


def test_nemotron_and_granite_json_lists() -> None:
    calls = '[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, {"name": "get_time", "arguments": {"tz": "CET"}}]'
    check(f"<TOOLCALL>{calls}</TOOLCALL>", calls=[WEATHER, TIME], tool_format=ToolFormat.NEMOTRON)
    check(f"<|tool_call|>{calls}", calls=[WEATHER, TIME], tool_format=ToolFormat.GRANITE)


def test_seed_oss_calls_and_reasoning() -> None:
    text = (
        "<seed:think>Weather first.</seed:think>"
        "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n"
        "<parameter=days>3</parameter>\n</function>\n</seed:tool_call>"
        "<seed:tool_call>\n<function=get_time>\n<parameter=tz>CET</parameter>\n</function>\n"
        "</seed:tool_call>"
    )
    check(
        text,
        calls=[WEATHER, TIME],
        reasoning="Weather first.",
        tool_format=ToolFormat.SEED_OSS,
        reasoning_format=ReasoningFormat.SEED_OSS,
        tools=TOOLS,
    )


@pytest.mark.parametrize("sep", ["\n", ""])  # GLM 4.6 writes newlines between parts, 4.7 none
def test_glm(sep: str) -> None:
    text = (
        f"<tool_call>get_weather{sep}<arg_key>city</arg_key>{sep}<arg_value>Paris</arg_value>{sep}"
        f"<arg_key>days</arg_key>{sep}<arg_value>3</arg_value>{sep}</tool_call>"
        f"<tool_call>get_time{sep}<arg_key>tz</arg_key>{sep}<arg_value>CET</arg_value>{sep}</tool_call>"
    )
    check(text, calls=[WEATHER, TIME], tool_format=ToolFormat.GLM, tools=TOOLS)


def test_minimax_m2() -> None:
    text = (
        '<think>Both.</think>\n<minimax:tool_call>\n<invoke name="get_weather">\n'
        '<parameter name="city">Paris</parameter>\n<parameter name="days">3</parameter>\n'
        '</invoke>\n<invoke name="get_time">\n<parameter name="tz">CET</parameter>\n</invoke>\n'
        "</minimax:tool_call>"
    )
    check(
        text,
        calls=[WEATHER, TIME],
        reasoning="Both.",
        tool_format=ToolFormat.MINIMAX_M2,
        tools=TOOLS,
    )


def test_ministral_think_and_several_new_form_calls() -> None:
    text = (
        '[THINK]Two tools.[/THINK]Here.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}'
        '[TOOL_CALLS]get_time[ARGS]{"tz": "CET"}'
    )
    check(
        text,
        calls=[WEATHER, TIME],
        content="Here.",
        reasoning="Two tools.",
        tool_format=ToolFormat.MISTRAL,
        reasoning_format=ReasoningFormat.MISTRAL,
    )


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>',
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
        "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
        '<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris", "days": 3}<|tool_call_end|><|tool_calls_section_end|>',
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}',
    ],
)
def test_unknown_template_tries_every_syntax(text: str) -> None:
    check("Ok. " + text, calls=[WEATHER], content="Ok.", tool_format=ToolFormat.AUTO, tools=TOOLS)


STREAMED = {
    ToolFormat.KIMI_K2: "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Paris", "days": 3}<|tool_call_end|>'
    "<|tool_calls_section_end|>",
    ToolFormat.DEEPSEEK: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
    '```json\n{"city": "Paris", "days": 3}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    ToolFormat.MISTRAL: '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}',
    ToolFormat.HARMONY: "<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Paris", "days": 3}<|call|>',
    # XML families: a string parameter streams as it is written (typed by the schema).
    ToolFormat.QWEN3_XML: "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
    "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
    ToolFormat.SEED_OSS: "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris"
    "</parameter>\n<parameter=days>3</parameter>\n</function>\n</seed:tool_call>",
    ToolFormat.MINIMAX_M2: '<minimax:tool_call>\n<invoke name="get_weather">\n'
    '<parameter name="city">Paris</parameter>\n<parameter name="days">3</parameter>\n'
    "</invoke>\n</minimax:tool_call>",
    ToolFormat.DEEPSEEK_DSML: '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
    '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
    '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>\n</｜DSML｜function_calls>",
}


@pytest.mark.parametrize("fmt", list(STREAMED))
def test_families_stream_their_arguments(fmt: ToolFormat) -> None:
    from engine.parsing import ReplyParser, ToolCallDelta, ToolCallStart

    kw: dict[str, Any] = {"tool_format": fmt, "tools": TOOLS}
    if fmt is ToolFormat.HARMONY:
        kw["reasoning_format"] = ReasoningFormat.HARMONY
    parser = ReplyParser(**kw)
    text = STREAMED[fmt]
    seen: list[tuple[int, object]] = []
    for at, char in enumerate(text):
        seen += [(at, e) for e in parser.feed(char)]
    (start_at,) = [at for at, e in seen if isinstance(e, ToolCallStart)]
    deltas = [(at, e) for at, e in seen if isinstance(e, ToolCallDelta)]
    assert len(deltas) >= 5  # piece by piece, not whole
    assert start_at <= text.index("Paris") < deltas[-1][0]
    parser.finish()
    assert [(c.name, c.arguments_object()) for c in parser.calls] == [WEATHER]
