"""Tool-call parsers: whole replies, replies streamed in every split, and odd shapes."""

from __future__ import annotations

import json

import pytest

from engine.parsing import (
    HERMES,
    LLAMA3,
    MISTRAL,
    ContentDelta,
    ParseEvent,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    call_schema,
    new_tool_call_parser,
    parse_tool_calls,
    tool_format_for_template,
)

HERMES_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def stream(fmt: str, pieces: list[str]) -> list[ParseEvent]:
    parser = new_tool_call_parser(fmt)
    events: list[ParseEvent] = []
    for piece in pieces:
        events += parser.feed(piece)
    return events + parser.finish()


def chars(text: str) -> list[str]:
    return list(text)


def assemble(events: list[ParseEvent]) -> tuple[str, list[tuple[str, str]]]:
    """What an OpenAI client assembles from the deltas: content and (name, arguments)."""
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    calls: dict[int, list[str]] = {}
    for e in events:
        if isinstance(e, ToolCallStart):
            calls[e.index] = [e.name, ""]
        elif isinstance(e, ToolCallDelta):
            calls[e.index][1] += e.arguments
    return content, [(name, args) for name, args in calls.values()]


@pytest.mark.parametrize("split", ["whole", "chars", "pairs"])
def test_hermes_call_streams_name_first_then_arguments(split: str) -> None:
    pieces = {
        "whole": [HERMES_CALL],
        "chars": chars(HERMES_CALL),
        "pairs": [HERMES_CALL[i : i + 2] for i in range(0, len(HERMES_CALL), 2)],
    }[split]
    events = stream(HERMES, pieces)
    content, calls = assemble(events)
    assert content == ""
    assert calls == [("get_weather", '{"city": "Paris"}')]
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert len(starts) == 1 and starts[0].id.startswith("call_")
    assert events.index(starts[0]) < min(
        i for i, e in enumerate(events) if isinstance(e, ToolCallDelta)
    )
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    assert ends[0].call.arguments_object() == {"city": "Paris"}
    assert ends[0].call.id == starts[0].id
    if split == "chars":
        assert len([e for e in events if isinstance(e, ToolCallDelta)]) > 5


def test_hermes_content_around_and_parallel_calls() -> None:
    text = (
        "Let me check.\n"
        + HERMES_CALL
        + "\n"
        + HERMES_CALL.replace("Paris", "Rome").replace("get_weather", "get_time")
    )
    content, calls = parse_tool_calls(HERMES, text)
    assert content == "Let me check."
    assert [(c.name, c.arguments_object()) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {"city": "Rome"}),
    ]
    streamed = assemble(stream(HERMES, chars(text)))
    assert streamed == (content, [(c.name, c.arguments) for c in calls])


def test_hermes_plain_reply_and_tag_like_text_pass_through() -> None:
    for text in ("Hello there", "a < b and <tool is not a tag", "ends with <tool_c"):
        assert parse_tool_calls(HERMES, text) == (text, [])
        assert assemble(stream(HERMES, chars(text))) == (text, [])


def test_hermes_malformed_block_becomes_content() -> None:
    text = "<tool_call>\nnot json\n</tool_call>"
    content, calls = parse_tool_calls(HERMES, text)
    assert calls == []
    assert "not json" in content


def test_hermes_unterminated_block_and_other_key_order() -> None:
    content, calls = parse_tool_calls(HERMES, '<tool_call>\n{"name": "f", "arguments": {"a": 1}}')
    assert (content, [(c.name, c.arguments) for c in calls]) == ("", [("f", '{"a": 1}')])
    text = '<tool_call>{"arguments": {"a": [1, "}"]}, "name": "f"}</tool_call>'
    _, calls = parse_tool_calls(HERMES, text)
    assert calls[0].name == "f" and calls[0].arguments_object() == {"a": [1, "}"]}
    assert assemble(stream(HERMES, chars(text)))[1] == [("f", '{"a": [1, "}"]}')]


def test_hermes_string_arguments_are_decoded() -> None:
    text = '<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>'
    _, calls = parse_tool_calls(HERMES, text)
    assert calls[0].arguments == '{"a": 1}'
    assert assemble(stream(HERMES, chars(text)))[1] == [("f", '{"a": 1}')]


def test_llama3_json_calls_and_plain_json_content() -> None:
    text = '<|python_tag|>{"name": "f", "parameters": {"x": 1}}; {"name": "g", "parameters": {}}'
    for pieces in ([text], chars(text)):
        content, calls = assemble(stream(LLAMA3, pieces))
        assert content == "" and calls == [("f", '{"x": 1}'), ("g", "{}")]
    plain = '{"name": "f", "parameters": {"x": 1}}'
    assert assemble(stream(LLAMA3, chars(plain)))[1] == [("f", '{"x": 1}')]
    answer = '{"answer": 4}'
    assert assemble(stream(LLAMA3, chars(answer))) == (answer, [])
    assert parse_tool_calls(LLAMA3, "Just text {not a call}") == ("Just text {not a call}", [])


def test_mistral_both_syntaxes() -> None:
    old = 'Sure. [TOOL_CALLS][{"name": "f", "arguments": {"x": 1}}, {"name": "g", "arguments": {}}]'
    content, calls = assemble(stream(MISTRAL, chars(old)))
    assert content == "Sure." and calls == [("f", '{"x": 1}'), ("g", "{}")]
    new = '[TOOL_CALLS]f[ARGS]{"x": 1}'
    assert assemble(stream(MISTRAL, chars(new)))[1] == [("f", '{"x": 1}')]


def test_format_from_template() -> None:
    assert tool_format_for_template("{% if tools %}<tool_call>{% endif %}") == HERMES
    assert tool_format_for_template("[AVAILABLE_TOOLS] [TOOL_CALLS]") == MISTRAL
    assert tool_format_for_template("<|start_header_id|>ipython<|python_tag|>") == LLAMA3
    assert tool_format_for_template(None) == HERMES


def test_call_schema_constrains_name_and_arguments() -> None:
    tools = [
        {"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "b"}},
    ]
    both = call_schema(HERMES, tools)
    assert [o["properties"]["name"]["const"] for o in both["anyOf"]] == ["a", "b"]
    only_b = call_schema(LLAMA3, tools, "b")
    assert only_b["required"] == ["name", "parameters"]
    json.dumps(only_b)
    with pytest.raises(ValueError, match="no tool named"):
        call_schema(HERMES, tools, "c")


def test_xml_parameter_opened_again_counts_once_whole_and_streamed() -> None:
    """A tiny Qwen3.5 under a forced grammar wrote ``<parameter=city>`` three times before
    its value: the whole reply gave ``{"city": "Paris"}`` but the stream sent the second tag
    as the value's text (``{"city": "<parameter=city``). Both now drop the false starts."""
    from engine.parsing.reply import ReplyParser
    from engine.parsing.tool_parsers.events import ToolCallDelta

    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    pieces = ["<tool_call>", "\n", "<function", "=get_weather", ">\n"]
    pieces += ["<parameter", "=city", ">\n"] * 3
    pieces += ["Paris", "\n", "</", "parameter", ">\n", "</function>\n", "</tool_call>"]
    parser = ReplyParser(tool_format="qwen3_xml", tools=tools)
    streamed = ""
    for piece in pieces:
        streamed += "".join(e.arguments for e in parser.feed(piece) if isinstance(e, ToolCallDelta))
    streamed += "".join(e.arguments for e in parser.finish() if isinstance(e, ToolCallDelta))
    assert json.loads(streamed) == {"city": "Paris"}
    assert [json.loads(c.arguments) for c in parser.calls] == [{"city": "Paris"}]
