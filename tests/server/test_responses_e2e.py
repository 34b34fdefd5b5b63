"""End to end: OpenAI's Responses API on ``sidelight serve``, driven by the ``openai`` SDK.

A real server on the tiny trained model, which answers the dialogues in
``tests/models/dialogues.json`` exactly under greedy decoding, so every reply, function call
and thought is asserted character for character: ``responses.create`` and
``responses.stream`` with function calls, ``previous_response_id`` across a tool round trip
and a multi-turn chat, reasoning items, GET and DELETE of stored responses.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import dialogue
from tests.server.harness import ServerProcess

pytestmark = pytest.mark.slow
# ``server`` is the package's shared one (tests/server/conftest.py): these tests only read.


def flat(tool: dict[str, Any]) -> Any:
    """A chat-completions tool in the Responses API's flat shape."""
    return {"type": "function", **tool["function"]}


def text_of(message: dict[str, Any]) -> str:
    return str(message["content"])


def test_create_answers_exactly(client: openai.OpenAI, model_id: str, dialogues: Any) -> None:
    hello = dialogue(dialogues, "hello")
    response = client.responses.create(model=model_id, input="Hello", temperature=0)
    assert response.status == "completed" and response.model == model_id
    assert response.output_text == hello["reply"]
    assert [item.type for item in response.output] == ["message"]
    usage = response.usage
    assert usage is not None and usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    system = dialogue(dialogues, "hello-system")
    with_instructions = client.responses.create(
        model=model_id,
        instructions=text_of(system["messages"][0]),
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Hello"}]}],
        temperature=0,
    )
    assert with_instructions.output_text == system["reply"]
    assert with_instructions.instructions == text_of(system["messages"][0])


def test_stream_answers_exactly(client: openai.OpenAI, model_id: str, dialogues: Any) -> None:
    reply = dialogue(dialogues, "multibyte")["reply"]
    with client.responses.stream(
        model=model_id, input="Say hello in Chinese", temperature=0
    ) as stream:
        types = [event.type for event in stream]
        final = stream.get_final_response()
    assert final.output_text == reply
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert types.count("response.output_text.delta") > 1


def test_function_call_round_trip_with_previous_response_id(
    client: openai.OpenAI, model_id: str, dialogues: Any
) -> None:
    tool, result = dialogue(dialogues, "tool"), dialogue(dialogues, "tool-result")
    tools = [flat(tool["tools"][0])]
    question = text_of(tool["messages"][0])
    with client.responses.stream(
        model=model_id, input=question, tools=tools, temperature=0
    ) as stream:
        arguments = "".join(
            e.delta for e in stream if e.type == "response.function_call_arguments.delta"
        )
        first = stream.get_final_response()
    (call,) = first.output
    assert call.type == "function_call" and call.status == "completed"
    assert call.name == "get_weather" and call.call_id.startswith("call_")
    assert json.loads(call.arguments) == json.loads(arguments) == {"city": "Paris"}
    answer = client.responses.create(
        model=model_id,
        previous_response_id=first.id,
        input=[
            {
                "type": "function_call_output",
                "call_id": call.call_id,
                "output": text_of(result["messages"][2]),
            }
        ],
        tools=tools,
        temperature=0,
    )
    assert answer.output_text == result["reply"]
    assert answer.previous_response_id == first.id


def test_the_whole_history_sent_back_works_too(
    client: openai.OpenAI, model_id: str, dialogues: Any
) -> None:
    """Codex's way: store false, and every turn carries the items so far."""
    tool, result = dialogue(dialogues, "tool"), dialogue(dialogues, "tool-result")
    tools = [flat(tool["tools"][0])]
    history: list[Any] = [{"role": "user", "content": text_of(tool["messages"][0])}]
    first = client.responses.create(
        model=model_id, input=history, tools=tools, temperature=0, store=False
    )
    history += [item.model_dump(exclude_none=True) for item in first.output]
    call_id = history[-1]["call_id"]
    output = text_of(result["messages"][2])
    history.append({"type": "function_call_output", "call_id": call_id, "output": output})
    answer = client.responses.create(
        model=model_id, input=history, tools=tools, temperature=0, store=False
    )
    assert answer.output_text == result["reply"]
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(answer.id)


def test_multi_turn_with_previous_response_id(
    client: openai.OpenAI, model_id: str, dialogues: Any
) -> None:
    turns = dialogue(dialogues, "multiturn")
    first = client.responses.create(model=model_id, input="Hello", temperature=0)
    assert first.output_text == text_of(turns["messages"][1])
    second = client.responses.create(
        model=model_id, previous_response_id=first.id, input="Count to twenty", temperature=0
    )
    assert second.output_text == turns["reply"]


def test_reasoning_items(client: openai.OpenAI, model_id: str, dialogues: Any) -> None:
    think = text_of(dialogue(dialogues, "think")["messages"][0])
    summary = client.responses.create(
        model=model_id, input=think, temperature=0, reasoning={"summary": "auto"}
    )
    thought, message = summary.output
    assert thought.type == "reasoning" and message.type == "message"
    assert [part.text for part in thought.summary] == ["2 plus 2 is 4."]
    assert summary.output_text == "The answer is 4."
    with client.responses.stream(model=model_id, input=think, temperature=0) as stream:
        raw = "".join(e.delta for e in stream if e.type == "response.reasoning_text.delta")
        final = stream.get_final_response()
    assert raw == "2 plus 2 is 4." and final.output_text == "The answer is 4."
    assert final.output[0].type == "reasoning"
    assert [part.text for part in final.output[0].content or []] == ["2 plus 2 is 4."]


def test_stored_responses_can_be_read_and_deleted(client: openai.OpenAI, model_id: str) -> None:
    created = client.responses.create(model=model_id, input="Hello", temperature=0)
    fetched = client.responses.retrieve(created.id)
    assert fetched.id == created.id and fetched.output_text == created.output_text
    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model=model_id, input="Hi", previous_response_id=created.id)
    assert info.value.body["param"] == "previous_response_id"  # type: ignore[index]


def test_hosted_tools_are_left_out_and_bad_fields_are_400s(
    server: ServerProcess, client: openai.OpenAI, model_id: str, dialogues: Any
) -> None:
    hello = dialogue(dialogues, "hello")
    response = client.responses.create(
        model=model_id, input="Hello", temperature=0, tools=[{"type": "web_search"}]
    )
    assert response.output_text == hello["reply"] and response.tools == []
    for extra, param in (
        ({"tools": [{"type": "custom", "name": "apply_patch"}]}, "tools.0.type"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input.0.content.0.image_url"),
        ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "nope"}}}}, "text.format.schema"),
    ):  # fmt: skip
        body = {"model": model_id, "input": "Hi", **extra}
        refused = httpx.post(f"{server.base_url}/v1/responses", json=body, timeout=30)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == param
    missing = httpx.post(
        f"{server.base_url}/v1/responses", json={"model": "no-such-model", "input": "Hi"}
    )
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "model"
