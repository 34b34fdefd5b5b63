"""Tolerant parsing: the slips small models make are repaired (and counted); a call that
cannot be read comes back as text, never as an exception."""

from __future__ import annotations

import logging

import pytest

from engine.parsing import ToolFormat, parse_tool_calls, repaired_calls
from engine.parsing.tool_parsers.repair import Unrepairable, loads_lenient
from tests.parsing.family_check import check
from tests.parsing.test_families import TOOLS


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("{'a': 'it\\'s', 'b': [1, 2,],}", {"a": "it's", "b": [1, 2]}),
        ('{"code": "line 1\nline 2\tend"}', {"code": "line 1\nline 2\tend"}),
        ('{"ok": True, "none": None}', {"ok": True, "none": None}),
        ('{"a": {"b": "c', {"a": {"b": "c"}}),
        ('{\'say\': "it\'s \\"fine\\""}', {"say": 'it\'s "fine"'}),
    ],
)
def test_loads_lenient_repairs(text: str, value: object) -> None:
    assert loads_lenient(text) == (value, True)


def test_loads_lenient_keeps_valid_json_and_refuses_nonsense() -> None:
    assert loads_lenient('{"a": 1}') == ({"a": 1}, False)
    with pytest.raises(Unrepairable):
        loads_lenient("not json at all")


def test_repaired_calls_are_returned_and_counted() -> None:
    before = repaired_calls()
    hermes = "<tool_call>{'name': 'get_time', 'arguments': {'tz': 'CET',}}</tool_call>"
    _, calls = parse_tool_calls(ToolFormat.HERMES, hermes)
    assert [(c.name, c.arguments_object()) for c in calls] == [("get_time", {"tz": "CET"})]
    kimi = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0"
        "<|tool_call_argument_begin|>{'tz': 'CET',}<|tool_call_end|><|tool_calls_section_end|>"
    )
    check(kimi, calls=[("get_time", {"tz": "CET"})], tool_format=ToolFormat.KIMI_K2)
    deepseek = (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>"
        '{"tz": "two\nlines"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    )
    check(deepseek, calls=[("get_time", {"tz": "two\nlines"})], tool_format=ToolFormat.DEEPSEEK)
    assert repaired_calls() > before


def test_missing_closing_tags_at_the_end_of_the_reply() -> None:
    qwen = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
    check(
        qwen,
        calls=[("get_weather", {"city": "Paris", "days": 3})],
        tool_format=ToolFormat.QWEN3_XML,
        tools=TOOLS,
    )
    hermes = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"'
    _, calls = parse_tool_calls(ToolFormat.HERMES, hermes)
    assert [(c.name, c.arguments_object()) for c in calls] == [("get_time", {"tz": "CET"})]
    minimax = '<minimax:tool_call>\n<invoke name="get_time">\n<parameter name="tz">CET'
    check(minimax, calls=[("get_time", {"tz": "CET"})], tool_format=ToolFormat.MINIMAX_M2)


def test_xml_values_that_are_json_are_decoded() -> None:
    text = (
        '<minimax:tool_call><invoke name="get_weather"><parameter name="where">'
        "{'lat': 48.8, 'tags': ['a',],}</parameter></invoke></minimax:tool_call>"
    )
    call = ("get_weather", {"where": {"lat": 48.8, "tags": ["a"]}})
    check(text, calls=[call], tool_format=ToolFormat.MINIMAX_M2, tools=TOOLS)


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        (
            ToolFormat.KIMI_K2,
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
            "<|tool_call_argument_begin|>not json at all<|tool_call_end|><|tool_calls_section_end|>",
        ),
        (ToolFormat.GEMMA4, "<|tool_call>nonsense<tool_call|>"),
        (ToolFormat.HERMES, "<tool_call>\nnot json\n</tool_call>"),
        (ToolFormat.NEMOTRON, "<TOOLCALL>[oops</TOOLCALL>"),
        (ToolFormat.GLM, "<tool_call>\n</tool_call>"),
    ],
)
def test_unrepairable_call_comes_back_as_text_and_is_logged(
    fmt: ToolFormat, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="engine.parsing"):
        content, calls = parse_tool_calls(fmt, "Before. " + text)
    assert calls == []
    assert content == "Before. " + text  # given back once, as written
    assert any(r.levelno == logging.WARNING for r in caplog.records)


def test_a_streamed_call_that_proves_unreadable_is_closed_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from engine.parsing import ToolCallEnd, new_tool_call_parser

    text = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
        '<|tool_call_argument_begin|>{"a": @@@}<|tool_call_end|><|tool_calls_section_end|>'
    )
    parser = new_tool_call_parser(ToolFormat.KIMI_K2)
    with caplog.at_level(logging.WARNING, logger="engine.parsing"):
        events = [e for char in text for e in parser.feed(char)] + parser.finish()
    # Announced while it streamed: it is closed with what was sent (a client that already
    # shows the call gets its end), never an exception; whole, the same text is content.
    (end,) = [e for e in events if isinstance(e, ToolCallEnd)]
    assert end.call.name == "f" and end.call.arguments == '{"a": @@@}'
    assert any("unreadable" in r.getMessage() for r in caplog.records)
    assert parse_tool_calls(ToolFormat.KIMI_K2, text) == (text, [])


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("{'a': 'it\\'s', 'b': [1, 2,],}", {"a": "it's", "b": [1, 2]}),
        (
            '{"code": "l1\nl2", "ok": True, "none": None}',
            {"code": "l1\nl2", "ok": True, "none": None},
        ),
        ('{"a": {"b": "c', {"a": {"b": "c"}}),
        ('  {"a": 1} trailing text', {"a": 1}),
        ('{"x": [1, 2] , "y": {"z": false,},}', {"x": [1, 2], "y": {"z": False}}),
    ],
)
def test_streaming_repair_gives_one_answer_however_the_text_is_split(
    text: str, value: object
) -> None:
    from engine.parsing.tool_parsers.repair import StreamingRepair

    outputs = set()
    for cut in range(len(text) + 1):
        streamer = StreamingRepair()
        outputs.add(streamer.feed(text[:cut]) + streamer.feed(text[cut:]) + streamer.finish())
    streamer = StreamingRepair()
    outputs.add("".join(streamer.feed(c) for c in text) + streamer.finish())
    (output,) = outputs
    assert loads_lenient(output) == (value, False)  # valid JSON itself, the repaired value
