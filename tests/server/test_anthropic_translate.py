"""Anthropic Messages requests -> the pipeline's GenerateRequest (validation and translation).

Pure functions on validated pydantic models; the HTTP side (error shape, statuses, event
streams) is in ``test_anthropic_routes.py`` and real inference in ``test_anthropic_e2e.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from engine.server.anthropic import protocol
from engine.server.anthropic.translate import generate_request
from engine.server.errors import APIError
from engine.server.pipeline import GenerateRequest, ToolChoice
from engine.worker.messages import SamplingParams

WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city name."}},
        "required": ["city"],
    },
}
WEATHER_FUNCTION = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": WEATHER["input_schema"],
    },
}


def translate(**body: Any) -> GenerateRequest:
    body.setdefault("model", "demo")
    body.setdefault("max_tokens", 100)
    return generate_request(protocol.MessagesRequest.model_validate(body))


def refused(**body: Any) -> APIError:
    with pytest.raises(APIError) as caught:
        translate(**body)
    assert caught.value.status == 400
    return caught.value


def invalid(**body: Any) -> str:
    body.setdefault("model", "demo")
    with pytest.raises(ValidationError) as caught:
        protocol.MessagesRequest.model_validate(body)
    return str(caught.value)


def test_a_plain_request_keeps_the_model_defaults() -> None:
    request = translate(messages=[{"role": "user", "content": "Hello"}])
    assert request == GenerateRequest(
        model="demo",
        dialect="anthropic",
        messages=[{"role": "user", "content": "Hello"}],
        max_tokens=100,
        split_reasoning=True,
    )
    assert request.sampling == SamplingParams()
    assert request.thinking is None


def test_sampling_fields_only_when_sent() -> None:
    request = translate(
        messages=[{"role": "user", "content": "Hi"}],
        temperature=0,
        top_p=0.5,
        top_k=40,
        stop_sequences=["\n\nHuman:", "END"],
        metadata={"user_id": "u"},
        service_tier="auto",
        context_management={"edits": []},
        output_config={"effort": "high"},
    )
    assert request.sampling == SamplingParams(temperature=0, top_p=0.5, top_k=40)
    assert request.stop == ("\n\nHuman:", "END")
    assert translate(messages=[{"role": "user", "content": "Hi"}], top_k=0).sampling.top_k is None


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "max_tokens\n  Field required"),
        ({"max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        ({"max_tokens": 5, "messages": []}, "messages\n  List should have at least 1 item"),
        (
            {"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "temperature": 1.5},
            "temperature",
        ),
        (
            {"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "top_k": -1},
            "top_k",
        ),
        (
            {
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "x"}],
                "stop_sequences": [""],
            },
            "stop_sequences.0",
        ),
        ({"max_tokens": 5, "messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
        (
            {
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"name": "bad name", "input_schema": {"type": "object"}}],
            },
            "tools.0.name",
        ),
        (
            {
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "web_search_20250305", "name": "web_search"}],
            },
            "server tools",
        ),
        (
            {
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"name": "t", "input_schema": {"type": "objekt"}}],
            },
            "unknown JSON Schema type",
        ),
        (
            {
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "x"}],
                "tools": [WEATHER],
                "tool_choice": {"type": "tool", "name": "nope"},
            },
            "no tool named 'nope'",
        ),
        (
            {
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "x"}],
                "tool_choice": {"type": "any"},
            },
            "needs at least one tool",
        ),
        (
            {
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "x"}],
                "thinking": {"type": "sometimes"},
            },
            "thinking.type",
        ),
    ],
)
def test_bad_fields_are_refused(body: dict[str, Any], fragment: str) -> None:
    assert fragment in invalid(**body)


def test_system_string_and_blocks() -> None:
    hello = [{"role": "user", "content": "Hello"}]
    plain = translate(system="Be brief.", messages=hello)
    assert plain.messages == [{"role": "system", "content": "Be brief."}, *hello]
    blocks = translate(
        system=[
            {
                "type": "text",
                "text": "x-anthropic-billing-header: cc_version=2.1; cc_entrypoint=cli;",
            },
            {"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Be brief."},
        ],
        messages=hello,
    )
    # Claude Code's billing header is for Anthropic's service, not for the model.
    assert blocks.messages == [
        {"role": "system", "content": "You are an agent.\nBe brief."},
        *hello,
    ]


def test_system_turns_join_the_leading_system_message() -> None:
    """Claude Code sends ``role: system`` turns; many templates take a system message only first."""
    request = translate(
        system="Top.",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<reminder>\n"},
                    {"type": "text", "text": "Hello"},
                ],
            },
            {"role": "system", "content": [{"type": "text", "text": "# Environment"}]},
            {
                "role": "system",
                "content": "Gone after the next user turn.",
                "clear_at": "next_user_message",
            },
            {"role": "user", "content": "Again"},
            {"role": "system", "content": "Still shown.", "clear_at": "next_user_message"},
        ],
    )
    # A turn cleared at the next user message stays where it is, as a note in a user turn:
    # in the head it would change the prompt's first tokens now and again once it goes.
    assert request.messages == [
        {"role": "system", "content": "Top.\n\n# Environment"},
        {
            "role": "user",  # consecutive turns merge
            "content": "<reminder>\n\nHello\n\nAgain\n\n"
            "<system-reminder>\nStill shown.\n</system-reminder>",
        },
    ]


def test_system_turns_after_the_first_reply_stay_in_place() -> None:
    """Joined to the head, each new mid-conversation system turn would change the prompt's
    first tokens, and the prefix cache would serve none of the conversation."""
    request = translate(
        system="Top.",
        messages=[
            {"role": "user", "content": "Hello"},
            {"role": "system", "content": "# Environment"},
            {"role": "assistant", "content": "Hi!"},
            {"role": "system", "content": "<system-reminder>\nPlan mode.\n</system-reminder>"},
            {"role": "system", "content": "Files changed."},
            {"role": "user", "content": "Go on"},
        ],
    )
    assert request.messages == [
        {"role": "system", "content": "Top.\n\n# Environment"},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi!"},
        {
            "role": "user",
            "content": "<system-reminder>\nPlan mode.\n</system-reminder>\n\n"
            "<system-reminder>\nFiles changed.\n</system-reminder>\n\nGo on",
        },
    ]


def test_tool_round_trip_history() -> None:
    """The demo model's ``tool-result`` dialogue, as the anthropic SDK sends it."""
    request = translate(
        tools=[WEATHER],
        messages=[
            {"role": "user", "content": "What is the weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "I should call the tool.", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {
                        "type": "tool_use",
                        "id": "toolu_0",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_0",
                        "content": '{"temperature_c": 22, "condition": "sunny"}',
                    }
                ],
            },
        ],
    )
    assert request.tools == [WEATHER_FUNCTION]
    assert request.messages == [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "I should call the tool.",
            "tool_calls": [
                {
                    "id": "toolu_0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "toolu_0",
            "content": '{"temperature_c": 22, "condition": "sunny"}',
            "name": "get_weather",
        },
    ]


def test_tool_results_with_blocks_come_before_the_text_of_their_turn() -> None:
    request = translate(
        tools=[WEATHER],
        messages=[
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool_use",
                        "id": "a",
                        "name": "get_weather",
                        "input": {"city": "Oslo"},
                    },
                    {
                        "type": "tool_use",
                        "id": "b",
                        "name": "get_weather",
                        "input": {"city": "Rome"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Both done."},
                    {
                        "type": "tool_result",
                        "tool_use_id": "a",
                        "content": [
                            {"type": "text", "text": "cold"},
                            {"type": "text", "text": "wet"},
                        ],
                    },
                    {"type": "tool_result", "tool_use_id": "b", "is_error": True},
                ],
            },
        ],
    )
    messages = request.messages or []
    assert messages[1]["content"] == "Checking."
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["a", "b"]
    assert messages[2:] == [
        {"role": "tool", "tool_call_id": "a", "content": "cold\nwet", "name": "get_weather"},
        {"role": "tool", "tool_call_id": "b", "content": "", "name": "get_weather"},
        {"role": "user", "content": "Both done."},
    ]


@pytest.mark.parametrize(
    ("choice", "expected", "parallel"),
    [
        (None, ToolChoice("auto"), True),
        ({"type": "auto"}, ToolChoice("auto"), True),
        ({"type": "any"}, ToolChoice("required"), True),
        ({"type": "tool", "name": "get_weather"}, ToolChoice("required", "get_weather"), True),
        ({"type": "none"}, ToolChoice("none"), True),
        ({"type": "auto", "disable_parallel_tool_use": True}, ToolChoice("auto"), False),
    ],
)
def test_tool_choice(choice: dict[str, Any] | None, expected: ToolChoice, parallel: bool) -> None:
    request = translate(
        messages=[{"role": "user", "content": "x"}], tools=[WEATHER], tool_choice=choice
    )
    assert (request.tool_choice, request.parallel_tool_calls) == (expected, parallel)


@pytest.mark.parametrize(
    ("thinking", "expected"),
    [
        ({"type": "enabled", "budget_tokens": 2048}, True),
        ({"type": "disabled"}, False),
        ({"type": "adaptive", "display": "omitted"}, None),  # Claude Code's default
        (None, None),
    ],
)
def test_thinking_switch(thinking: dict[str, Any] | None, expected: bool | None) -> None:
    request = translate(messages=[{"role": "user", "content": "x"}], thinking=thinking)
    assert request.thinking is expected


def test_deferred_tools_are_offered_once_named() -> None:
    deferred = {**WEATHER, "name": "later", "defer_loading": True}
    plain = translate(messages=[{"role": "user", "content": "x"}], tools=[WEATHER, deferred])
    assert [t["function"]["name"] for t in plain.tools] == ["get_weather"]
    searched = translate(
        tools=[WEATHER, deferred],
        messages=[
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "s", "name": "get_weather", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "s",
                        "content": [{"type": "tool_reference", "tool_name": "later"}],
                    }
                ],
            },
        ],
    )
    assert [t["function"]["name"] for t in searched.tools] == ["get_weather", "later"]
    # The template lists the tool offered from the start; the loaded one is described where
    # it was loaded, so loading it leaves the prompt's head (and its prefix cache) alone.
    assert searched.listed_tools == 1
    later = json.dumps(searched.tools[1], ensure_ascii=False)
    assert (searched.messages or [])[-1]["content"] == f"Tool loaded: later\n{later}"
    changed = translate(
        tools=[WEATHER, deferred],
        messages=[
            {"role": "user", "content": "x"},
            {
                "role": "system",
                "content": [
                    {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "later"}},
                    {
                        "type": "tool_removal",
                        "tool": {"type": "tool_reference", "name": "get_weather"},
                    },
                    {
                        "type": "tool_addition",
                        "tool": {
                            "type": "tool_definition",
                            "definition": {**WEATHER, "name": "inline"},
                        },
                    },
                ],
            },
        ],
    )
    assert [t["function"]["name"] for t in changed.tools] == ["later", "inline"]
    assert changed.listed_tools is None  # none listed from the start: the template lists all
    described = "\n".join(
        f"Tool loaded: {t['function']['name']}\n{json.dumps(t, ensure_ascii=False)}"
        for t in changed.tools
    )
    assert changed.messages == [
        {"role": "system", "content": described},
        {"role": "user", "content": "x"},
    ]


@pytest.mark.parametrize(
    ("messages", "param", "fragment"),
    [
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {
                            "type": "image",
                            "source": {"type": "url", "url": "http://192.168.1.1/cam.png"},
                        },
                    ],
                }
            ],
            "messages.0.content.1.source.url",
            "remote image URLs are not fetched",
        ),
        (
            [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "t", "name": "get_weather", "input": {}}
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t",
                            "content": [
                                {"type": "image", "source": {"type": "file", "file_id": "f"}}
                            ],
                        }
                    ],
                },
            ],
            "messages.2.content.0.content.0.source",
            "source.type 'base64'",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [{"type": "document", "source": {"type": "text", "data": "x"}}],
                }
            ],
            "messages.0.content.0",
            "type 'document' are not supported",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [{"type": "tool_use", "id": "t", "name": "n", "input": {}}],
                }
            ],
            "messages.0.content.0",
            "a tool_use block cannot be part of a user turn",
        ),
        (
            [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "The answer is ("},
            ],
            "messages.1",
            "(a prefill)",
        ),
        (
            [
                {
                    "role": "system",
                    "content": [
                        {
                            "type": "tool_addition",
                            "tool": {"type": "tool_reference", "name": "nope"},
                        }
                    ],
                },
                {"role": "user", "content": "x"},
            ],
            "messages.0.content.0.tool.name",
            "no tool named 'nope'",
        ),
    ],
)
def test_unusable_content_is_refused_naming_the_block(
    messages: list[dict[str, Any]], param: str, fragment: str
) -> None:
    error = refused(messages=messages, tools=[WEATHER])
    assert error.param == param
    assert error.message.startswith(f"{param}: ")
    assert fragment in error.message


def test_count_tokens_request_has_no_limits() -> None:
    body = protocol.CountTokensRequest.model_validate(
        {"model": "demo", "messages": [{"role": "user", "content": "Hello"}], "tools": [WEATHER]}
    )
    request = generate_request(body)
    assert request.max_tokens is None and request.stop == ()
    assert request.tools == [WEATHER_FUNCTION]


def test_model_listing_in_anthropics_shape() -> None:
    cards = [
        {"id": "demo", "object": "model", "created": 86400, "context_length": 2048, "task": "chat"},
        {
            "id": "embed",
            "object": "model",
            "created": 0,
            "context_length": 512,
            "task": "embeddings",
        },
    ]
    page = protocol.model_page(cards)
    assert page == {
        "data": [
            {
                "type": "model",
                "id": "demo",
                "display_name": "demo",
                "created_at": "1970-01-02T00:00:00Z",
                "lifecycle": "active",
                "max_input_tokens": 2048,
                "max_tokens": 2048,
            }
        ],
        "has_more": False,
        "first_id": "demo",
        "last_id": "demo",
    }


def test_image_blocks_travel_by_index_with_their_turn() -> None:
    """A user turn's image and a tool result's screenshot: the request's images, in order,
    each named by its block; the turns name them by index."""
    png = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
    request = translate(
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": png},
                    {"type": "text", "text": "What is this?"},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "get_weather", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t",
                        "content": [{"type": "image", "source": png}],
                    }
                ],
            },
        ],
        tools=[WEATHER],
    )
    assert [ref.field for ref in request.images] == [
        "messages.0.content.0.source.data",
        "messages.2.content.0.content.0.source.data",
    ]
    assert [m.get("images") for m in request.messages or []] == [[0], None, [1]]
