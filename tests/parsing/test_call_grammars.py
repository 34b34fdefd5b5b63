"""Each family's call grammar accepts the family's real wire form and refuses calls off the
schema; the planner picks it for forced and ``auto`` tool choices (issue 22).

Pure: the grammar trees are checked with a matcher (``tests/parsing/grammar_match.py``)
against the replies the tiny family models were trained on (``tests/fixtures/family-*``,
native markup under the real templates) and against other spellings of the same family.
That the worker's GenAI grammar behaves the same is ``tests/server/test_family_grammars_e2e.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.parsing import ToolFormat, parse_tool_calls, tool_format_for_template
from engine.parsing.tool_parsers.constrain import family_grammar
from engine.parsing.tool_parsers.grammar import CallGrammar, Unconstrained
from engine.server.errors import APIError
from engine.server.pipeline.plan import plan_request
from engine.server.pipeline.request import GenerateRequest, ToolChoice
from tests.parsing.grammar_match import accepts

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TEMPLATES = FIXTURES / "templates"
# family fixture -> (format, the stop token that ends its call reply: not the grammar's)
FAMILIES: dict[str, tuple[ToolFormat, str]] = {
    "gpt-oss": (ToolFormat.HARMONY, "<|call|>"),
    "qwen3-coder": (ToolFormat.QWEN3_XML, "<|im_end|>"),
    "deepseek-r1": (ToolFormat.DEEPSEEK, "<｜end▁of▁sentence｜>"),
    "gemma4": (ToolFormat.GEMMA4, "<|tool_response>"),
    "kimi-k2": (ToolFormat.KIMI_K2, "<|im_end|>"),
    "glm-4.6": (ToolFormat.GLM, "<|observation|>"),
    "deepseek-v3.2": (ToolFormat.DEEPSEEK_DSML, "<｜end▁of▁sentence｜>"),
    "seed-oss": (ToolFormat.SEED_OSS, "<seed:eos>"),
    "minimax-m2": (ToolFormat.MINIMAX_M2, "[e~["),
}
HELLO = [{"role": "user", "content": "Hello"}]
# The fixtures whose generation prompt opens <think> (the reply closes it).
OPENED = {"deepseek-r1", "deepseek-v3.2", "minimax-m2"}


def _data(family: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (FIXTURES / f"family-{family}" / "dialogues.json").read_text(encoding="utf-8")
    )
    return data


def _grammar(family: str, tools: list[dict[str, Any]] | None = None) -> CallGrammar:
    fmt = FAMILIES[family][0]
    grammar = family_grammar(fmt, tools or _data(family)["tools"], None, True)
    assert isinstance(grammar, CallGrammar)
    return grammar


def _reply(family: str, name: str) -> str:
    reply: str = _data(family)["replies"][name]
    return reply.removesuffix(FAMILIES[family][1])


def _tool(properties: dict[str, Any], required: list[str]) -> list[dict[str, Any]]:
    parameters = {"type": "object", "properties": properties, "required": required}
    return [{"type": "function", "function": {"name": "f", "parameters": parameters}}]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_forced_grammar_accepts_the_trained_call_and_refuses_others(family: str) -> None:
    forced = _grammar(family).forced(True, opened=family in OPENED)
    call = _reply(family, "tool")
    assert accepts(forced, call), call
    assert not accepts(forced, _reply(family, "plain"))  # a text answer
    for wrong in (call.replace("city", "town"), call.replace("get_weather", "get_time")):
        assert not accepts(forced, wrong), wrong


def test_a_reply_in_an_opened_think_block_must_close_it_before_calling() -> None:
    """Only where the prompt opened ``<think>`` may the reply start with free text (up to
    ``</think>``); elsewhere free text would let a model that does not reason answer in text."""
    grammar = _grammar("qwen3-coder")
    call = _reply("qwen3-coder", "tool")
    thought = "I will look it up.\n</think>\n\n" + call
    assert accepts(grammar.forced(True, opened=True), thought)
    assert accepts(grammar.forced(True, opened=True), call)
    assert not accepts(grammar.forced(True), thought)
    assert accepts(grammar.forced(True), "<think>I will look it up.</think>\n" + call)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_lazy_grammar_leaves_text_free_and_holds_the_call(family: str) -> None:
    lazy = _grammar(family).lazy(True)
    assert lazy is not None
    assert accepts(lazy, _reply(family, "tool"))
    assert accepts(lazy, _reply(family, "plain"))  # no trigger: free text
    assert not accepts(lazy, _reply(family, "tool").replace("city", "town"))


@pytest.mark.parametrize(
    ("family", "text", "opened"),
    [
        # DeepSeek V3.1's spelling, no reasoning
        (
            "deepseek-r1",
            '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}'
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            False,
        ),
        # GLM-4.7: no newlines between the parts
        (
            "glm-4.6",
            "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
            False,
        ),
        # Qwen3.5: the generation prompt opened <think>; the reply closes it, then calls
        (
            "qwen3-coder",
            "I will look it up.\n</think>\n\n<tool_call>\n<function=get_weather>\n"
            "<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
            True,
        ),
        # Kimi: two calls in one section when parallel calls are allowed
        (
            "kimi-k2",
            '<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>'
            '<|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>{"city": "Rome"}<|tool_call_end|><|tool_calls_section_end|>',
            False,
        ),
        # DSML with thinking off (``<think></think>`` in the prompt): two invokes in a block
        (
            "deepseek-v3.2",
            "\n\n<｜DSML｜function_calls>\n"
            '<｜DSML｜invoke name="get_weather">\n'
            '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
            "</｜DSML｜invoke>\n"
            '<｜DSML｜invoke name="get_weather">\n'
            '<｜DSML｜parameter name="city" string="true">Rome</｜DSML｜parameter>\n'
            "</｜DSML｜invoke>\n</｜DSML｜function_calls>",
            False,
        ),
        # Seed-OSS without a thinking block (a thinking budget of 0), two calls
        (
            "seed-oss",
            "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n"
            "</function>\n</seed:tool_call>\n<seed:tool_call>\n<function=get_weather>\n"
            "<parameter=city>Rome</parameter>\n</function>\n</seed:tool_call>",
            False,
        ),
        # MiniMax-M2: two invokes in one block
        (
            "minimax-m2",
            'I will look.\n</think>\n\n<minimax:tool_call>\n<invoke name="get_weather">\n'
            '<parameter name="city">Paris</parameter>\n</invoke>\n<invoke name="get_weather">\n'
            '<parameter name="city">Rome</parameter>\n</invoke>\n</minimax:tool_call>',
            True,
        ),
    ],
)
def test_other_spellings_of_a_family_are_accepted(family: str, text: str, opened: bool) -> None:
    fmt = FAMILIES[family][0]
    grammar = family_grammar(fmt, _data(family)["tools"], None, False)
    assert isinstance(grammar, CallGrammar)
    assert accepts(grammar.forced(False, opened=opened), text)
    text = text.rpartition("</think>")[2]  # (reasoning is the reasoning parser's)
    text = text.rpartition("</seed:think>")[2]
    content, calls = parse_tool_calls(fmt, text, _data(family)["tools"])
    assert not content.strip() and calls and calls[0].name == "get_weather"


def test_parallel_tool_calls_false_allows_one_call() -> None:
    two = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    two = two + "\n" + two
    tools = _data("qwen3-coder")["tools"]
    many = family_grammar(ToolFormat.QWEN3_XML, tools, None, False)
    one = family_grammar(ToolFormat.QWEN3_XML, tools, None, True)
    assert isinstance(many, CallGrammar) and isinstance(one, CallGrammar)
    assert accepts(many.forced(False), two) and not accepts(one.forced(True), two)


def test_xml_parameters_are_typed_by_the_schema_and_optional_ones_may_be_left_out() -> None:
    tools = _tool({"q": {"type": "string"}, "n": {"type": "integer"}}, ["q"])
    grammar = family_grammar(ToolFormat.QWEN3_XML, tools, None, True)
    assert isinstance(grammar, CallGrammar)
    head, tail = "<tool_call>\n<function=f>\n", "</function>\n</tool_call>"
    q = "<parameter=q>\nany text, even <b>\n</parameter>\n"
    assert accepts(grammar.forced(True), head + q + tail)
    assert accepts(grammar.forced(True), head + q + "<parameter=n>\n12\n</parameter>\n" + tail)
    assert not accepts(
        grammar.forced(True), head + q + "<parameter=n>\ntwelve\n</parameter>\n" + tail
    )
    assert not accepts(grammar.forced(True), head + tail)  # q is required


@pytest.mark.parametrize(
    ("fmt", "head", "text_param", "json_param", "tail"),
    [
        (
            ToolFormat.DEEPSEEK_DSML,
            '<｜DSML｜function_calls>\n<｜DSML｜invoke name="f">\n',
            '<｜DSML｜parameter name="q" string="true">{}</｜DSML｜parameter>\n',
            '<｜DSML｜parameter name="n" string="false">{}</｜DSML｜parameter>\n',
            "</｜DSML｜invoke>\n</｜DSML｜function_calls>",
        ),
        (
            ToolFormat.MINIMAX_M2,
            '<minimax:tool_call>\n<invoke name="f">\n',
            '<parameter name="q">{}</parameter>\n',
            '<parameter name="n">{}</parameter>\n',
            "</invoke>\n</minimax:tool_call>",
        ),
        (
            ToolFormat.SEED_OSS,
            "<seed:tool_call>\n<function=f>\n",
            "<parameter=q>{}</parameter>\n",
            "<parameter=n>{}</parameter>\n",
            "</function>\n</seed:tool_call>",
        ),
    ],
)
def test_invoke_and_seed_parameters_are_typed_by_the_schema(
    fmt: ToolFormat, head: str, text_param: str, json_param: str, tail: str
) -> None:
    """A string is text up to its closing tag, anything else JSON valid for its schema
    (DSML says which with ``string="true|false"``); optional ones may be left out."""
    tools = _tool({"q": {"type": "string"}, "n": {"type": "integer"}}, ["q"])
    grammar = family_grammar(fmt, tools, None, True)
    assert isinstance(grammar, CallGrammar)
    forced = grammar.forced(True)
    q = text_param.format("any text, even <b>")
    assert accepts(forced, head + q + tail)
    assert accepts(forced, head + q + json_param.format("12") + tail)
    assert not accepts(forced, head + q + json_param.format("twelve") + tail)
    assert not accepts(forced, head + tail)  # q is required
    _, calls = parse_tool_calls(fmt, head + q + json_param.format("12") + tail, tools)
    assert json.loads(calls[0].arguments) == {"q": "any text, even <b>", "n": 12}


def test_gemma_arguments_are_sorted_comma_joined_and_typed() -> None:
    tools = _tool(
        {"b": {"type": "integer"}, "a": {"type": "string"}, "c": {"type": "boolean"}}, ["c"]
    )
    grammar = family_grammar(ToolFormat.GEMMA4, tools, None, True)
    assert isinstance(grammar, CallGrammar)

    def call(arguments: str) -> str:
        return f"<|tool_call>call:f{{{arguments}}}<tool_call|>"

    forced = grammar.forced(True)
    assert accepts(forced, call('a:<|"|>x, y<|"|>,b:3,c:true'))
    assert accepts(forced, call("c:false"))
    assert accepts(forced, call('a:<|"|>a < b <| c <|"<|"|>,c:true'))  # '<' but no quote token
    assert accepts(forced, call("b:-4,c:true"))
    assert not accepts(forced, call(",c:true"))
    assert not accepts(forced, call('b:3,a:<|"|>x<|"|>,c:true'))  # not in sorted order
    assert not accepts(forced, call("a:3,c:true"))  # a string is quoted
    _, calls = parse_tool_calls(ToolFormat.GEMMA4, call('a:<|"|>x, y<|"|>,b:3,c:true'))
    assert json.loads(calls[0].arguments) == {"a": "x, y", "b": 3, "c": True}


@pytest.mark.parametrize(
    ("fmt", "parameters", "reason"),
    [
        (
            ToolFormat.GEMMA4,
            {"type": "object", "properties": {"p": {"type": "object"}}},
            Unconstrained.SCHEMA_NOTATION,
        ),
        (
            ToolFormat.QWEN3_XML,
            {"type": "object", "properties": {}, "additionalProperties": True},
            Unconstrained.SCHEMA_NOTATION,
        ),
        (
            ToolFormat.DEEPSEEK_DSML,
            {"type": "object", "properties": {}, "additionalProperties": True},
            Unconstrained.SCHEMA_NOTATION,
        ),
        (ToolFormat.SEED_OSS, {"type": "array"}, Unconstrained.SCHEMA_NOTATION),
        (
            ToolFormat.MINIMAX_M2,
            {"type": "object", "additionalProperties": {"type": "string"}},
            Unconstrained.SCHEMA_NOTATION,
        ),
        (ToolFormat.LLAMA3, {"type": "object"}, Unconstrained.NO_GRAMMAR),
    ],
)
def test_what_cannot_be_held_says_why(
    fmt: ToolFormat, parameters: dict[str, Any], reason: Unconstrained
) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": parameters}}]
    assert family_grammar(fmt, tools, None, True) is reason


@pytest.mark.parametrize(
    ("template", "fmt"),
    [
        ("openai-gpt-oss-120b", ToolFormat.HARMONY),
        ("Qwen3-Coder", ToolFormat.QWEN3_XML),
        ("Qwen3.5-4B", ToolFormat.QWEN3_XML),
        ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", ToolFormat.DEEPSEEK),
        ("deepseek-ai-DeepSeek-V3.1", ToolFormat.DEEPSEEK),
        ("google-gemma-4-31B-it", ToolFormat.GEMMA4),
        ("Kimi-K2-Instruct", ToolFormat.KIMI_K2),
        ("GLM-4.6", ToolFormat.GLM),
        ("GLM-4.7-Flash", ToolFormat.GLM),
        ("deepseek-ai-DeepSeek-V3.2", ToolFormat.DEEPSEEK_DSML),
        ("ByteDance-Seed-OSS", ToolFormat.SEED_OSS),
        ("MiniMax-M2", ToolFormat.MINIMAX_M2),
    ],
)
def test_the_planner_constrains_forced_and_auto_calls_in_the_family_syntax(
    template: str, fmt: ToolFormat
) -> None:
    text = (TEMPLATES / f"{template}.jinja").read_text(encoding="utf-8")
    assert tool_format_for_template(text) is fmt
    tools = _data("qwen3-coder")["tools"]
    for choice in (ToolChoice("required"), ToolChoice(name="get_weather")):
        request = GenerateRequest(
            model="m", dialect="openai", messages=HELLO, tools=tools, tool_choice=choice
        )
        plan = plan_request(request, text)
        assert plan.constraint is not None and plan.constraint.structure is not None
        assert not plan.constraint.lazy and plan.constraint.param == "tools"
    auto = plan_request(
        GenerateRequest(model="m", dialect="openai", messages=HELLO, tools=tools), text
    )
    assert auto.constraint is not None and auto.constraint.lazy
    assert auto.constraint.structure is not None
    with pytest.raises(APIError) as refused:
        plan_request(
            GenerateRequest(
                model="m",
                dialect="openai",
                messages=HELLO,
                tools=tools,
                tool_choice=ToolChoice(name="nope"),
            ),
            text,
        )
    assert (refused.value.status, refused.value.param) == (400, "tool_choice")


def test_a_forced_call_the_family_cannot_hold_runs_unconstrained() -> None:
    text = (TEMPLATES / "google-gemma-4-31B-it.jinja").read_text(encoding="utf-8")
    tools = _tool({"where": {"type": "object", "properties": {"lat": {"type": "number"}}}}, [])
    request = GenerateRequest(
        model="m", dialect="openai", messages=HELLO, tools=tools, tool_choice=ToolChoice("required")
    )
    plan = plan_request(request, text)
    assert plan.tool_format is ToolFormat.GEMMA4 and plan.constraint is None


@pytest.mark.parametrize(
    ("family", "template", "marker", "end"),
    [
        ("nemotron-nano-v2", "NVIDIA-Nemotron-Nano-v2", "<TOOLCALL>", "<SPECIAL_12>"),
        ("granite-3.3", "ibm-granite-granite-3.3-2B-Instruct", "<|tool_call|>", "<|end_of_text|>"),
    ],
)
def test_json_list_families_hold_an_opened_list_under_auto(
    family: str, template: str, marker: str, end: str
) -> None:
    """Nemotron's ``<TOOLCALL>[...]</TOOLCALL>`` and Granite's ``<|tool_call|>[...]`` (no
    closing tag): under ``auto`` the list is held to the tools' schemas from the marker on,
    text before it stays free; ``parallel_tool_calls: false`` allows one call."""
    text = (TEMPLATES / f"{template}.jinja").read_text(encoding="utf-8")
    tools = _data(family)["tools"]
    plan = plan_request(
        GenerateRequest(model="m", dialect="openai", messages=HELLO, tools=tools), text
    )
    assert plan.constraint is not None and plan.constraint.lazy
    lazy = plan.constraint.structure
    assert lazy is not None
    reply: str = _data(family)["replies"]["tool"]
    call = reply[reply.index(marker) :].removesuffix(end)
    assert accepts(lazy, call), call
    assert accepts(lazy, _data(family)["replies"]["plain"].removesuffix(end))
    assert not accepts(lazy, call.replace("city", "town"))
    assert not accepts(lazy, call.replace("get_weather", "get_time"))
    two = call.replace("}}]", '}}, {"name": "get_weather", "arguments": {"city": "Rome"}}]')
    assert accepts(lazy, two)
    single = plan_request(
        GenerateRequest(
            model="m", dialect="openai", messages=HELLO, tools=tools, parallel_tool_calls=False
        ),
        text,
    )
    assert single.constraint is not None and single.constraint.structure is not None
    assert accepts(single.constraint.structure, call)
    assert not accepts(single.constraint.structure, two)
