"""End to end: the official ``anthropic`` SDK against ``sidelight serve`` on the demo model.

Real inference through the real pipeline: the demo model answers its trained dialogues
exactly under greedy decoding (its default; the SDK has no sampling parameters any more,
so the one test of them sends them as extra body fields), so replies, tool calls and thinking blocks are asserted
character for character, whole (``messages.create``) and streamed (``messages.stream``,
read by the SDK's own accumulator). ``count_tokens`` must agree with the prompt size the
generation reports.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import TextBlock, ThinkingBlock, ToolUseBlock

from tests.conftest import dialogue
from tests.server.harness import ServerProcess

pytestmark = pytest.mark.slow
# ``server`` is the package's shared one (tests/server/conftest.py): these tests only read.

MODEL = "sidelight-demo"


@pytest.fixture
def claude(server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0) as client:
        yield client


def anthropic_tools(openai_tools: list[dict[str, Any]]) -> Any:
    """The dialogues' OpenAI-shaped tools as Anthropic's (name, description, input_schema)."""
    return [
        {
            "name": t["function"]["name"],
            "description": t["function"]["description"],
            "input_schema": t["function"]["parameters"],
        }
        for t in openai_tools
    ]


def only_text(message: anthropic.types.Message) -> str:
    (block,) = message.content
    assert isinstance(block, TextBlock)
    return block.text


# ---- text ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["hello", "multibyte", "multiturn"])
def test_create_answers_the_trained_reply(
    claude: anthropic.Anthropic, dialogues: dict[str, Any], name: str
) -> None:
    chat = dialogue(dialogues, name)
    message = claude.messages.create(model=MODEL, max_tokens=200, messages=chat["messages"])
    assert only_text(message) == chat["reply"]
    assert message.id.startswith("msg_") and message.model == MODEL
    assert message.role == "assistant" and message.type == "message"
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0


@pytest.mark.parametrize("name", ["hello", "multibyte"])
def test_stream_answers_the_trained_reply(
    claude: anthropic.Anthropic, dialogues: dict[str, Any], name: str
) -> None:
    chat = dialogue(dialogues, name)
    with claude.messages.stream(model=MODEL, max_tokens=200, messages=chat["messages"]) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) > 1  # token by token, not one block at the end
    assert "".join(pieces) == chat["reply"] == only_text(final)
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens > 0


def test_sampling_fields_are_taken(claude: anthropic.Anthropic, dialogues: dict[str, Any]) -> None:
    chat = dialogue(dialogues, "hello")
    message = claude.messages.create(
        model=MODEL,
        max_tokens=200,
        messages=chat["messages"],
        extra_body={"temperature": 0, "top_p": 0.9, "top_k": 1},
    )
    assert only_text(message) == chat["reply"]


@pytest.mark.parametrize(
    "system",
    ["You are a helpful assistant.", [{"type": "text", "text": "You are a helpful assistant."}]],
    ids=["string", "blocks"],
)
def test_system_prompt(claude: anthropic.Anthropic, dialogues: dict[str, Any], system: Any) -> None:
    chat = dialogue(dialogues, "hello-system")
    assert chat["messages"][0] == {"role": "system", "content": "You are a helpful assistant."}
    message = claude.messages.create(
        model=MODEL, max_tokens=200, system=system, messages=chat["messages"][1:]
    )
    assert only_text(message) == chat["reply"]


def test_stop_sequence_and_max_tokens(
    claude: anthropic.Anthropic, dialogues: dict[str, Any]
) -> None:
    count = dialogue(dialogues, "count")
    stopped = claude.messages.create(
        model=MODEL,
        max_tokens=200,
        messages=count["messages"],
        stop_sequences=["five"],
    )
    assert only_text(stopped) == "one two three four "
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", "five")
    cut = claude.messages.create(model=MODEL, max_tokens=3, messages=count["messages"])
    assert count["reply"].startswith(only_text(cut))
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 3


# ---- tools ---------------------------------------------------------------------------------


def test_tool_use(claude: anthropic.Anthropic, dialogues: dict[str, Any]) -> None:
    tool = dialogue(dialogues, "tool")
    request: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 200,
        "messages": tool["messages"],
        "tools": anthropic_tools(tool["tools"]),
    }
    whole = claude.messages.create(**request)
    with claude.messages.stream(**request) as stream:
        json_pieces = [e.partial_json for e in stream if e.type == "input_json"]
        streamed = stream.get_final_message()
    for message in (whole, streamed):
        (block,) = message.content
        assert isinstance(block, ToolUseBlock)
        assert block.id.startswith("toolu_")
        assert (block.name, block.input) == ("get_weather", {"city": "Paris"})
        assert message.stop_reason == "tool_use"
    assert len(json_pieces) > 1  # the input streams as JSON deltas


@pytest.mark.parametrize("block_content", [False, True], ids=["string", "blocks"])
def test_tool_result_round_trip(
    claude: anthropic.Anthropic, dialogues: dict[str, Any], block_content: bool
) -> None:
    chat = dialogue(dialogues, "tool-result")
    user, assistant, result = chat["messages"]
    call = assistant["tool_calls"][0]["function"]
    content: Any = result["content"]
    if block_content:
        content = [{"type": "text", "text": content}]
    message = claude.messages.create(
        model=MODEL,
        max_tokens=200,
        tools=anthropic_tools(chat["tools"]),
        messages=[
            user,
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_0",
                        "name": call["name"],
                        "input": call["arguments"],
                    }
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_0", "content": content}],
            },
        ],
    )
    assert only_text(message) == chat["reply"]
    assert message.stop_reason == "end_turn"


def test_forced_tool_gives_valid_input_on_an_untrained_prompt(
    claude: anthropic.Anthropic, dialogues: dict[str, Any]
) -> None:
    tool = dialogue(dialogues, "tool")
    message = claude.messages.create(
        model=MODEL,
        max_tokens=100,
        messages=[{"role": "user", "content": "Hello"}],
        tools=anthropic_tools(tool["tools"]),
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    (block,) = [b for b in message.content if isinstance(b, ToolUseBlock)]
    assert block.name == "get_weather"
    assert isinstance(block.input, dict) and isinstance(block.input.get("city"), str)
    assert message.stop_reason == "tool_use"


# ---- thinking ------------------------------------------------------------------------------


def test_thinking_is_its_own_block(claude: anthropic.Anthropic, dialogues: dict[str, Any]) -> None:
    think = dialogue(dialogues, "think")
    request: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 200,
        "messages": think["messages"],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }
    whole = claude.messages.create(**request)
    with claude.messages.stream(**request) as stream:
        thoughts = "".join(e.thinking for e in stream if e.type == "thinking")
        streamed = stream.get_final_message()
    assert thoughts == "2 plus 2 is 4."
    for message in (whole, streamed):
        thinking, text = message.content
        assert isinstance(thinking, ThinkingBlock) and thinking.thinking == "2 plus 2 is 4."
        assert isinstance(text, TextBlock) and text.text == "The answer is 4."
    # Claude Code's default: thinking blocks come back without their text.
    omitted = claude.messages.create(
        **{**request, "thinking": {"type": "adaptive", "display": "omitted"}}
    )
    thinking, text = omitted.content
    assert isinstance(thinking, ThinkingBlock) and thinking.thinking == ""
    assert isinstance(text, TextBlock) and text.text == "The answer is 4."


# ---- count_tokens --------------------------------------------------------------------------


def test_count_tokens_matches_the_generation(
    claude: anthropic.Anthropic, dialogues: dict[str, Any]
) -> None:
    for chat, tools in (
        (dialogue(dialogues, "hello"), []),
        (dialogue(dialogues, "tool"), anthropic_tools(dialogue(dialogues, "tool")["tools"])),
    ):
        counted = claude.messages.count_tokens(model=MODEL, messages=chat["messages"], tools=tools)
        message = claude.messages.create(
            model=MODEL, max_tokens=50, messages=chat["messages"], tools=tools
        )
        # Anthropic counts prefix-cache reads apart from input_tokens; count_tokens is the sum.
        usage = message.usage
        assert counted.input_tokens == usage.input_tokens + (usage.cache_read_input_tokens or 0)
        assert usage.input_tokens > 0
    # A prompt over the 2048-token context is counted, not refused.
    long = claude.messages.count_tokens(
        model=MODEL, messages=[{"role": "user", "content": "word " * 3000}]
    )
    assert long.input_tokens > 3000


# ---- errors --------------------------------------------------------------------------------


def test_errors_reach_the_sdk_as_anthropics(
    claude: anthropic.Anthropic, server: ServerProcess
) -> None:
    hello: Any = [{"role": "user", "content": "Hello"}]
    with pytest.raises(anthropic.NotFoundError) as missing:
        claude.messages.create(model="no-such-model", max_tokens=10, messages=hello)
    body: Any = missing.value.body
    assert body["type"] == "error" and body["error"]["type"] == "not_found_error"
    assert "no-such-model" in str(missing.value)
    with pytest.raises(anthropic.BadRequestError) as too_long:
        claude.messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "word " * 3000}]
        )
    assert re.search(
        r"maximum context length is 2048 tokens, but the prompt has \d+", str(too_long.value)
    )
    with pytest.raises(anthropic.BadRequestError) as image:
        claude.messages.create(
            model=MODEL,
            max_tokens=10,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": "iVBORw0KGgo=",
                            },
                        }
                    ],
                }
            ],
        )
    assert f"The model '{MODEL}' cannot see images" in str(image.value)
    no_limit = httpx.post(
        f"{server.base_url}/v1/messages",
        json={"model": MODEL, "messages": hello},
        headers={"anthropic-version": "2023-06-01"},
    )
    assert no_limit.status_code == 400
    assert no_limit.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"},
    }


# ---- models --------------------------------------------------------------------------------


def test_model_list_in_either_shape(claude: anthropic.Anthropic, server: ServerProcess) -> None:
    models = list(claude.models.list())
    assert [(m.id, m.type, m.display_name) for m in models] == [(MODEL, "model", MODEL)]
    assert models[0].max_input_tokens == 2048
    assert claude.models.retrieve(MODEL).id == MODEL
    openai_shape = httpx.get(f"{server.base_url}/v1/models").json()
    assert openai_shape["object"] == "list"
    assert [m["id"] for m in openai_shape["data"]] == [MODEL]
