"""Responses API requests: validation (400s naming the field) and translation into the
pipeline's GenerateRequest (messages, tools, tool_choice, formats, reasoning, limits)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.server.errors import APIError
from engine.server.pipeline import ToolChoice
from engine.server.responses.protocol import parse_request
from engine.server.responses.translate import translate
from tests.conftest import ROOT

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CODEX_CAPTURE = ROOT / "tests" / "fixtures" / "plugin_requests" / "codex.json"


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "input": "Hello", **fields}


def refusal(data: dict[str, Any]) -> APIError:
    with pytest.raises(APIError) as info:
        translate(parse_request(data))
    assert info.value.status == 400
    assert info.value.message.startswith(f"{info.value.param}: ")
    return info.value


# ---- validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"model": ""}, "model"),
        ({"input": 3}, "input"),
        ({"input": []}, "input"),
        ({"input": [{"role": "developer", "content": "Only rules."}]}, "input"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input.0.content.0.image_url"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/a.png"}]}]}, "input.0.content.0.image_url"),
        ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input.0.content.0"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input.0.role"),
        ({"input": ["Hello", {"type": "message", "role": "user", "content": "x"}]}, "input.0"),
        ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input.0.call_id"),
        ({"input": [{"type": "function_call_output", "call_id": "c", "output": 5}]}, "input.0.output"),
        ({"input": [{"type": "reasoning", "summary": [{"type": "summary_text"}]}]}, "input.0.summary.0.text"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input.0.type"),
        ({"input": [{"type": "computer_call_output", "call_id": "c"}]}, "input.0.type"),
        ({"tools": [{"type": "custom", "name": "apply_patch"}]}, "tools.0.type"),
        ({"tools": [{"type": "local_shell"}]}, "tools.0.type"),
        ({"tools": [{"type": "function", "name": "two words"}]}, "tools.0.name"),
        ({"tools": [{"type": "function", "name": "f", "parameters": {"type": "thing"}}]}, "tools.0.parameters"),
        ({"tools": [{"type": "namespace", "name": "n", "tools": [{"type": "function"}]}]}, "tools.0.tools.0.name"),
        ({"tools": [WEATHER, {**WEATHER, "description": "again"}]}, "tools"),
        ({"tools": [{"type": "namespace", "name": f"n{i}", "tools": [{**WEATHER, "name": f"f{i}_{j}"} for j in range(20)]} for i in range(7)]}, "tools"),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"tool_choice": {"type": "web_search"}}, "tool_choice"),
        ({"tool_choice": {"type": "function", "name": "nope"}, "tools": [WEATHER]}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tool_choice": "required", "tools": [{"type": "web_search"}]}, "tool_choice"),
        ({"tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "x"}]}, "tools": [WEATHER]}, "tool_choice"),
        ({"text": {"format": {"type": "json_schema", "name": "r", "schema": {"type": "nope"}}}}, "text.format.schema"),
        ({"text": {"format": {"type": "json_schema", "name": "r"}}}, "text.format.schema"),
        ({"text": {"format": {"type": "xml"}}}, "text.format"),
        ({"reasoning": {"effort": "extreme"}}, "reasoning.effort"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"temperature": 2.5}, "temperature"),
        ({"top_p": -1}, "top_p"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ({"background": True}, "background"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
    ],
)  # fmt: skip
def test_bad_fields_are_400s_naming_them(fields: dict[str, Any], param: str) -> None:
    assert refusal(body(**fields)).param == param


def test_media_and_unknown_items_say_what_is_supported() -> None:
    image = [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]
    assert "file_id is not supported" in refusal(body(input=image)).message
    audio = [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]
    assert "read text and images" in refusal(body(input=audio)).message
    unknown = refusal(body(input=[{"type": "web_search_call", "id": "ws_1"}])).message
    assert "'web_search_call' items are not supported" in unknown
    assert "function_call_output" in unknown


# ---- messages ----------------------------------------------------------------------------


def messages(data: dict[str, Any], history: list[dict[str, Any]] | None = None) -> Any:
    return translate(parse_request(data), history).request.messages


def test_string_input_is_one_user_message() -> None:
    request = translate(parse_request(body())).request
    assert request.messages == [{"role": "user", "content": "Hello"}]
    assert request.dialect == "responses" and request.model == "m" and request.prompt is None


def test_instructions_and_leading_developer_messages_are_one_system_prompt() -> None:
    items = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
        {"role": "system", "content": "Use metric units."},
        {"role": "user", "content": [{"type": "input_text", "text": "Hi"}, {"type": "input_text", "text": "!"}]},
        {"role": "developer", "content": "Late note."},
    ]  # fmt: skip
    assert messages(body(instructions="You help.", input=items)) == [
        {"role": "system", "content": "You help.\n\nBe brief.\n\nUse metric units."},
        {"role": "user", "content": "Hi!"},
        {"role": "system", "content": "Late note."},
    ]


def test_calls_results_and_reasoning_become_one_assistant_turn() -> None:
    items = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Two cities."}]},
        {"type": "message", "role": "assistant", "status": "completed", "id": "msg_1",
         "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
        {"type": "function_call", "call_id": "call_a", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call", "call_id": "call_b", "name": "get_weather", "arguments": '{"city":"Rome"}'},
        {"type": "function_call_output", "call_id": "call_a", "output": "22 C"},
        {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "25 C"}]},
        {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "Both warm."}], "summary": []},
        {"type": "function_call", "call_id": "call_c", "name": "get_weather", "arguments": "{}"},
    ]  # fmt: skip

    def call(call_id: str, arguments: str) -> dict[str, Any]:
        function = {"name": "get_weather", "arguments": arguments}
        return {"id": call_id, "type": "function", "function": function}

    assert messages(body(input=items, tools=[WEATHER])) == [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "reasoning_content": "Two cities.",
            "tool_calls": [call("call_a", '{"city":"Paris"}'), call("call_b", '{"city":"Rome"}')],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "22 C"},
        {"role": "tool", "tool_call_id": "call_b", "content": "25 C"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call("call_c", "{}")],
            "reasoning_content": "Both warm.",
        },
    ]


def test_history_comes_first_and_is_kept_with_this_input() -> None:
    history = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hello"}]},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Hi!"}],
        },
    ]
    turn = translate(parse_request(body(input="Count", instructions="New rules.")), history)
    assert turn.request.messages == [
        {"role": "system", "content": "New rules."},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi!"},
        {"role": "user", "content": "Count"},
    ]
    assert turn.context == [
        *history,
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Count"}]},
    ]


# ---- tools, formats, reasoning, limits ----------------------------------------------------


def test_function_tools_are_offered_in_chat_shape_and_hosted_ones_left_out() -> None:
    spawn = {"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}}
    namespace = {
        "type": "namespace",
        "name": "agents",
        "description": "Sub-agents.",
        "tools": [spawn],
    }
    tools = [{"type": "web_search", "external_web_access": False}, WEATHER, namespace]
    turn = translate(parse_request(body(tools=tools)))
    assert turn.request.tools == [
        {"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}},
        {"type": "function", "function": {"name": "spawn_agent", "parameters": {"type": "object"}}},
    ]
    assert turn.namespaces == {"spawn_agent": "agents"}
    assert [t["type"] for t in turn.tools] == ["function", "namespace"]
    assert turn.request.tool_choice == ToolChoice("auto")
    assert turn.request.parallel_tool_calls is True


@pytest.mark.parametrize(
    ("choice", "expected", "offered"),
    [
        ("none", ToolChoice("none"), ["get_weather", "get_time"]),
        ("required", ToolChoice("required"), ["get_weather", "get_time"]),
        ({"type": "function", "name": "get_time"}, ToolChoice("required", "get_time"), ["get_weather", "get_time"]),
        ({"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_time"}]}, ToolChoice("required"), ["get_time"]),
    ],
)  # fmt: skip
def test_tool_choice(choice: Any, expected: ToolChoice, offered: list[str]) -> None:
    time_tool = {"type": "function", "name": "get_time", "parameters": {"type": "object"}}
    request = translate(parse_request(body(tools=[WEATHER, time_tool], tool_choice=choice))).request
    assert request.tool_choice == expected
    assert [t["function"]["name"] for t in request.tools] == offered


def test_text_formats_constrain_the_reply() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    json_schema = {"type": "json_schema", "name": "place", "schema": schema, "strict": True}
    request = translate(parse_request(body(text={"format": json_schema}))).request
    assert request.response_schema == schema and request.schema_param == "text.format"
    json_object = translate(parse_request(body(text={"format": {"type": "json_object"}})))
    assert json_object.request.response_schema == {"type": "object"}
    assert (
        translate(parse_request(body(text={"format": {"type": "text"}}))).request.response_schema
        is None
    )


@pytest.mark.parametrize(
    ("reasoning", "thinking", "kwargs"),
    [
        (None, None, {}),
        ({"summary": "auto"}, None, {}),
        ({"effort": "none"}, False, {}),
        ({"effort": "minimal"}, True, {}),
        ({"effort": "high", "summary": "detailed"}, True, {"reasoning_effort": "high"}),
    ],
)
def test_reasoning_switches_thinking(
    reasoning: dict[str, str] | None, thinking: bool | None, kwargs: dict[str, str]
) -> None:
    request = translate(parse_request(body(reasoning=reasoning))).request
    assert request.thinking is thinking
    assert request.chat_template_kwargs == kwargs


def test_limits_sampling_and_logprobs() -> None:
    data = body(
        max_output_tokens=64,
        temperature=0.2,
        top_p=0.9,
        parallel_tool_calls=False,
        include=["message.output_text.logprobs"],
    )
    request = translate(parse_request(data)).request
    assert request.max_tokens == 64
    assert request.sampling.temperature == pytest.approx(0.2)
    assert request.sampling.top_p == pytest.approx(0.9)
    assert request.parallel_tool_calls is False and request.logprobs is True
    assert request.stop == ()


def test_codex_capture_translates() -> None:
    """Codex's real default request: web_search and a namespace beside its function tools."""
    for recorded in json.loads(CODEX_CAPTURE.read_text(encoding="utf-8"))["requests"]:
        turn = translate(parse_request(json.loads(recorded["body"])))
        assert turn.request.messages and turn.request.messages[-1] == {
            "role": "user",
            "content": "Hello",
        }
        names = [t["function"]["name"] for t in turn.request.tools]
        assert len(names) == len(set(names))
