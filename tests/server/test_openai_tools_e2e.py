"""End to end: tools, structured output, reasoning, completions extras and embeddings.

A real ``sidelight serve`` on the tiny trained model (and, for embeddings, the tiny BERT in
``tests/fixtures/tiny-embed`` placed in the server's model store), driven by the official
``openai`` SDK. The model answers the dialogue prompts exactly under greedy decoding, so tool
calls and think blocks are asserted character for character; on prompts it was never trained
for, ``tool_choice`` and ``response_format`` must still produce complete JSON, valid against
its schema, that ends within a modest ``max_tokens`` (no whitespace padding).
"""

from __future__ import annotations

import base64
import json
import math
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import openai
import pytest
from pydantic import BaseModel, Field

from engine.settings import load_settings
from engine.store import ModelStore
from engine.store.manifest import Manifest, Source
from tests.conftest import ROOT, dialogue
from tests.schema_check import conforms, is_compact
from tests.server.harness import ServerProcess, running_server

pytestmark = pytest.mark.slow

TINY_EMBED = ROOT / "tests" / "fixtures" / "tiny-embed"
EMBED_ID = "tiny-embed"
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Get the local time in a time zone.",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string"}, "24h": {"type": "boolean"}},
            "required": ["zone", "24h"],
            "additionalProperties": False,
        },
    },
}


def _store_embedding_model(home: Path) -> None:
    store = ModelStore(load_settings({"SIDELIGHT_HOME": str(home)}).paths.models_dir)
    store.root.mkdir(parents=True, exist_ok=True)
    staged = store.root / ".staged-embed"
    shutil.copytree(TINY_EMBED, staged)
    store.commit(
        staged,
        Manifest(
            id=EMBED_ID,
            name=EMBED_ID,
            format="ir",
            entry=".",
            source=Source(kind="convert", path=str(TINY_EMBED)),
            size_bytes=1,
            task="embeddings",
        ),
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("tools-home")
    _store_embedding_model(home)
    with running_server(home, tiny_model) as proc:
        yield proc


# ---- tools -------------------------------------------------------------------------------


def test_tool_call_is_parsed(client: openai.OpenAI, model_id: str, dialogues: Any) -> None:
    tool = dialogue(dialogues, "tool")
    response = client.chat.completions.create(
        model=model_id, messages=tool["messages"], tools=tool["tools"], temperature=0
    )
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    calls = choice.message.tool_calls or []
    assert len(calls) == 1 and calls[0].type == "function"
    assert calls[0].id.startswith("call_")
    assert calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}


def test_streamed_tool_call_deltas_have_openai_shape(
    server: ServerProcess, model_id: str, dialogues: Any
) -> None:
    tool = dialogue(dialogues, "tool")
    body = {
        "model": model_id,
        "messages": tool["messages"],
        "tools": tool["tools"],
        "temperature": 0,
        "stream": True,
    }
    deltas, finish = [], []
    with httpx.stream("POST", f"{server.base_url}/v1/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                choice = json.loads(line[6:])["choices"][0]
                deltas.extend(choice["delta"].get("tool_calls") or [])
                finish.append(choice["finish_reason"])
    first, rest = deltas[0], deltas[1:]
    assert first["index"] == 0 and first["type"] == "function"
    assert first["id"].startswith("call_") and first["function"]["name"] == "get_weather"
    assert rest and all(set(d) == {"index", "function"} for d in rest)
    assert all(set(d["function"]) == {"arguments"} for d in rest)
    arguments = first["function"]["arguments"] + "".join(d["function"]["arguments"] for d in rest)
    assert json.loads(arguments) == {"city": "Paris"}
    assert [f for f in finish if f] == ["tool_calls"]


def test_stream_helper_assembles_tool_calls(
    client: openai.OpenAI, model_id: str, dialogues: Any
) -> None:
    tool = dialogue(dialogues, "tool")
    with client.chat.completions.stream(
        model=model_id, messages=tool["messages"], tools=tool["tools"], temperature=0
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]


def test_tool_result_history_goes_through_the_template(
    client: openai.OpenAI, model_id: str, dialogues: Any
) -> None:
    result = dialogue(dialogues, "tool-result")
    messages = json.loads(json.dumps(result["messages"]))
    for message in messages:  # as clients send them: arguments as a JSON string
        for call in message.get("tool_calls", []):
            call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
    response = client.chat.completions.create(
        model=model_id, messages=messages, tools=result["tools"], temperature=0
    )
    assert response.choices[0].message.content == result["reply"]
    assert response.choices[0].finish_reason == "stop"


def test_tool_choice_required_and_named_give_schema_valid_calls(
    client: openai.OpenAI, model_id: str, dialogues: Any
) -> None:
    weather = dialogue(dialogues, "tool")["tools"][0]
    untrained = dialogue(dialogues, "fallback-00")["messages"]
    required = client.chat.completions.create(
        model=model_id,
        messages=untrained,
        tools=[weather, TIME_TOOL],
        tool_choice="required",
        temperature=0,
        max_tokens=80,
    )
    calls = required.choices[0].message.tool_calls or []
    assert calls and required.choices[0].finish_reason == "tool_calls"
    by_name = {"get_weather": weather, "get_time": TIME_TOOL}
    for call in calls:
        schema = by_name[call.function.name]["function"]["parameters"]
        assert conforms(schema, json.loads(call.function.arguments))
    # Named: only that function may be called, even where the model would answer in text.
    named = client.chat.completions.create(
        model=model_id,
        messages=dialogue(dialogues, "hello")["messages"],
        tools=[weather, TIME_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        temperature=0,
        max_tokens=80,
    )
    calls = named.choices[0].message.tool_calls or []
    assert [c.function.name for c in calls] == ["get_weather"]
    assert conforms(weather["function"]["parameters"], json.loads(calls[0].function.arguments))


def test_constrained_calls_finish_on_untrained_prompts(
    client: openai.OpenAI, model_id: str, dialogues: Any
) -> None:
    # The model was never taught get_time: before compact-JSON grammars it padded the
    # arguments with whitespace until max_tokens on every one of these prompts.
    for choice in ("required", {"type": "function", "function": {"name": "get_time"}}):
        for messages in _untrained(dialogues):
            response = client.chat.completions.create(
                model=model_id,
                messages=messages,
                tools=[TIME_TOOL],
                tool_choice=choice,  # type: ignore[arg-type]
                temperature=0,
                max_tokens=60,
            )
            answer = response.choices[0]
            assert answer.finish_reason == "tool_calls", answer
            arguments = (answer.message.tool_calls or [])[0].function.arguments
            assert is_compact(arguments), arguments
            assert conforms(TIME_TOOL["function"]["parameters"], json.loads(arguments))


def test_auto_calls_are_held_to_the_tools_once_the_model_opens_one(
    client: openai.OpenAI, model_id: str, dialogues: Any
) -> None:
    """``tool_choice: "auto"`` and a lazy grammar: free text until ``<tool_call>``, then a
    call valid against the tools given. The tiny model was trained to call
    ``get_weather({"city": ...})`` on this prompt; offered a ``get_weather`` whose parameter
    is ``location``, unconstrained it writes ``city``, which the client's schema refuses.
    With the grammar, the call it opens has the client's parameters."""
    tool = dialogue(dialogues, "tool")
    renamed = json.loads(json.dumps(tool["tools"]))
    parameters = {
        "type": "object",
        "properties": {"location": {"type": "string", "maxLength": 20}},
        "required": ["location"],
        "additionalProperties": False,
    }
    renamed[0]["function"]["parameters"] = parameters
    for stream in (False, True):
        kwargs: dict[str, Any] = {"temperature": 0, "max_tokens": 60, "tools": renamed}
        names: list[str] = []
        if stream:
            chunks = client.chat.completions.create(
                model=model_id, messages=tool["messages"], stream=True, **kwargs
            )
            arguments, finish = "", None
            for chunk in chunks:
                choice = chunk.choices[0]
                for call in choice.delta.tool_calls or []:
                    if call.function and call.function.name:
                        names.append(call.function.name)
                    if call.function and call.function.arguments:
                        arguments += call.function.arguments
                finish = choice.finish_reason or finish
        else:
            response = client.chat.completions.create(
                model=model_id, messages=tool["messages"], **kwargs
            )
            answer = response.choices[0]
            calls = answer.message.tool_calls or []
            names = [c.function.name for c in calls]
            arguments = calls[0].function.arguments if calls else ""
            finish = answer.finish_reason
        assert (names, finish) == (["get_weather"], "tool_calls"), (stream, names, finish)
        assert conforms(parameters, json.loads(arguments)), arguments


def test_a_lazy_grammar_that_cannot_compile_is_dropped_not_refused(
    client: openai.OpenAI, model_id: str, dialogues: Any
) -> None:
    """A tool schema XGrammar refuses (an empty ``enum``): forcing a call with it is a 400
    naming ``tools``; with ``tool_choice: "auto"`` the client asked for no constraint, so the
    request runs unconstrained and is answered."""
    broken = json.loads(json.dumps(TIME_TOOL))
    broken["function"]["parameters"]["properties"]["zone"] = {"enum": []}
    plain = dialogue(dialogues, "fallback-00")["messages"]
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model=model_id, messages=plain, tools=[broken], tool_choice="required", max_tokens=8
        )
    assert refused.value.body["param"] == "tools"  # type: ignore[index]
    for _ in range(2):  # the second one reads the probe's cached verdict
        answer = client.chat.completions.create(
            model=model_id, messages=plain, tools=[broken], temperature=0, max_tokens=8
        )
        assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls")
        assert answer.usage is not None and answer.usage.completion_tokens > 0


def test_tool_choice_none_and_plain_prompts_give_content(
    client: openai.OpenAI, model_id: str, dialogues: Any
) -> None:
    tool = dialogue(dialogues, "tool")
    response = client.chat.completions.create(
        model=model_id,
        messages=tool["messages"],
        tools=tool["tools"],
        tool_choice="none",
        temperature=0,
        max_tokens=40,
    )
    choice = response.choices[0]
    assert choice.message.tool_calls is None and choice.message.content
    assert choice.finish_reason in ("stop", "length")


def test_bad_tool_fields_are_400s_naming_them(client: openai.OpenAI, model_id: str) -> None:
    messages = [{"role": "user", "content": "Hi"}]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": [TIME_TOOL]}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "thing"}}}]}, "tools"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}}, "response_format"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "(("}}}}, "response_format"),
    ]  # fmt: skip
    for extra, param in cases:
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model=model_id, messages=messages, **extra)
        assert info.value.status_code == 400
        assert info.value.body["param"] == param, info.value.body  # type: ignore[index]
    # The engine is still healthy after refusing a schema it could not compile.
    ok = client.chat.completions.create(model=model_id, messages=messages, temperature=0)
    assert ok.choices[0].message.content


# ---- structured output -------------------------------------------------------------------


class WeatherCall(BaseModel):
    name: str
    arguments: dict[str, str]


def test_parse_with_a_pydantic_model(client: openai.OpenAI, model_id: str, dialogues: Any) -> None:
    tool = dialogue(dialogues, "tool")
    completion = client.chat.completions.parse(
        model=model_id,
        messages=tool["messages"],
        response_format=WeatherCall,
        temperature=0,
        max_tokens=60,
    )
    parsed = completion.choices[0].message.parsed
    assert parsed == WeatherCall(name="get_weather", arguments={"city": "Paris"})


REPORT_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "celsius": {"type": "integer"},
        "sky": {"enum": ["clear", "cloudy", "rain"]},
        "wind": {
            "type": "object",
            "properties": {"kph": {"type": "number"}, "gusty": {"type": "boolean"}},
            "required": ["kph", "gusty"],
            "additionalProperties": False,
        },
        "alerts": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 2},
        "note": {"type": ["string", "null"], "maxLength": 8},
    },
    "required": ["city", "celsius", "sky", "wind", "alerts", "note"],
    "additionalProperties": False,
}


class Forecast(BaseModel):
    city: str = Field(max_length=20)
    celsius: int
    sky: Literal["clear", "cloudy", "rain"]
    raining: bool


def _untrained(dialogues: Any) -> list[Any]:
    """Ten prompts the tiny model was never trained to answer in JSON."""
    return [dialogue(dialogues, f"fallback-{i:02d}")["messages"] for i in range(10)]


def test_json_schema_replies_finish_on_untrained_prompts(
    client: openai.OpenAI, model_id: str, dialogues: Any
) -> None:
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "report", "schema": REPORT_SCHEMA, "strict": True},
    }
    for messages in _untrained(dialogues):
        response = client.chat.completions.create(
            model=model_id,
            messages=messages,
            response_format=response_format,  # type: ignore[arg-type]
            temperature=0,
            max_tokens=120,  # greedy replies take 86-96 tokens (the tokenizer is tiny)
        )
        answer = response.choices[0]
        content = answer.message.content or ""
        assert answer.finish_reason == "stop", content
        assert is_compact(content) and conforms(REPORT_SCHEMA, json.loads(content)), content


def test_parse_with_a_pydantic_model_on_untrained_prompts(
    client: openai.OpenAI, model_id: str, dialogues: Any
) -> None:
    for messages in _untrained(dialogues)[:5]:
        completion = client.chat.completions.parse(
            model=model_id,
            messages=messages,
            response_format=Forecast,
            temperature=0,
            max_tokens=60,
        )
        answer = completion.choices[0]
        assert answer.finish_reason == "stop", answer.message.content
        assert isinstance(answer.message.parsed, Forecast)


def test_json_object_format_constrains_the_reply(
    client: openai.OpenAI, model_id: str, dialogues: Any
) -> None:
    # The tiny model wanders inside the free-form keys and strings of an untyped object, so
    # only the start and, if it finished, the whole object are checked.
    response = client.chat.completions.create(
        model=model_id,
        messages=dialogue(dialogues, "hello")["messages"],
        response_format={"type": "json_object"},
        temperature=0,
        max_tokens=30,
    )
    content = response.choices[0].message.content or ""
    assert content.startswith("{")
    if response.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(content), dict)


# ---- reasoning ---------------------------------------------------------------------------


def test_reasoning_is_separate_from_content(
    client: openai.OpenAI, model_id: str, dialogues: Any
) -> None:
    think = dialogue(dialogues, "think")
    response = client.chat.completions.create(
        model=model_id, messages=think["messages"], temperature=0
    )
    message = response.choices[0].message
    assert message.content == "The answer is 4."
    assert message.model_extra and message.model_extra["reasoning_content"] == "2 plus 2 is 4."
    reasoning, content = "", ""
    for chunk in client.chat.completions.create(
        model=model_id, messages=think["messages"], temperature=0, stream=True
    ):
        if chunk.choices:
            delta = chunk.choices[0].delta
            reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
            content += delta.content or ""
    assert (reasoning, content) == ("2 plus 2 is 4.", "The answer is 4.")


def test_chat_template_kwargs_and_reasoning_effort_are_accepted(
    client: openai.OpenAI, model_id: str, dialogues: Any
) -> None:
    hello = dialogue(dialogues, "hello")
    response = client.chat.completions.create(
        model=model_id,
        messages=hello["messages"],
        temperature=0,
        reasoning_effort="low",
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    assert response.choices[0].message.content == hello["reply"]


# ---- completions -------------------------------------------------------------------------


def test_completion_echo_and_logprobs(client: openai.OpenAI, model_id: str) -> None:
    response = client.completions.create(
        model=model_id, prompt="Hello", max_tokens=4, temperature=0, echo=True, logprobs=1
    )
    choice = response.choices[0]
    assert choice.text.startswith("Hello") and len(choice.text) > len("Hello")
    logprobs = choice.logprobs
    assert logprobs is not None and logprobs.tokens and logprobs.token_logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == 4
    assert "".join(logprobs.tokens) == choice.text[len("Hello") :]
    assert all(lp is not None and lp <= 0 for lp in logprobs.token_logprobs)
    assert logprobs.text_offset and logprobs.text_offset[0] == len("Hello")
    streamed = [
        c.choices[0]
        for c in client.completions.create(
            model=model_id, prompt="Hello", max_tokens=4, temperature=0, logprobs=1, stream=True
        )
        if c.choices
    ]
    tokens = [t for c in streamed if c.logprobs for t in c.logprobs.tokens or []]
    assert tokens == logprobs.tokens


def test_chat_logprobs(client: openai.OpenAI, model_id: str, dialogues: Any) -> None:
    hello = dialogue(dialogues, "hello")
    response = client.chat.completions.create(
        model=model_id, messages=hello["messages"], temperature=0, logprobs=True, max_tokens=3
    )
    entries = response.choices[0].logprobs.content  # type: ignore[union-attr]
    assert entries and len(entries) == 3
    assert "".join(e.token for e in entries) == response.choices[0].message.content


def test_suffix_without_fim_tokens_is_a_400_naming_the_model(
    client: openai.OpenAI, model_id: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=model_id, prompt="def add(a, b):", suffix="\n")
    body: dict[str, Any] = info.value.body  # type: ignore[assignment]
    assert body["param"] == "suffix" and model_id in body["message"]


# ---- embeddings --------------------------------------------------------------------------


def test_embeddings_float_base64_and_usage(client: openai.OpenAI) -> None:
    texts = ["Hello world", "def add(a, b): return a + b"]
    floats = client.embeddings.create(model=EMBED_ID, input=texts, encoding_format="float")
    assert floats.model == EMBED_ID
    assert [d.index for d in floats.data] == [0, 1]
    vectors = [d.embedding for d in floats.data]
    assert all(len(v) == 32 for v in vectors)
    assert all(math.isclose(math.fsum(x * x for x in v), 1.0, rel_tol=1e-4) for v in vectors)
    assert vectors[0] != vectors[1]
    assert floats.usage.prompt_tokens == floats.usage.total_tokens > 2
    single = client.embeddings.create(model=EMBED_ID, input="Hello world")
    assert single.data[0].embedding == pytest.approx(vectors[0], abs=1e-5)
    raw = httpx.post(
        f"{client.base_url}embeddings",
        json={"model": EMBED_ID, "input": texts, "encoding_format": "base64"},
    ).json()
    decoded = base64.b64decode(raw["data"][0]["embedding"])
    assert list(struct.unpack(f"<{len(decoded) // 4}f", decoded)) == pytest.approx(
        vectors[0], abs=1e-6
    )


def test_embeddings_and_chat_refuse_the_wrong_kind_of_model(
    client: openai.OpenAI, model_id: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model=model_id, input="x")
    assert info.value.body["param"] == "model"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=EMBED_ID, messages=[{"role": "user", "content": "x"}])
    assert info.value.body["param"] == "model"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="no-such-model", input="x")


# ---- GGUF --------------------------------------------------------------------------------


def test_gguf_keeps_tool_and_think_tags(tmp_path: Path, tiny_gguf: Path, dialogues: Any) -> None:
    """GenAI's GGUF tokenizer treats <tool_call> and <think> as special; they must survive."""
    proc = ServerProcess(tmp_path / "gguf-home", tiny_gguf)
    try:
        model = str(proc.wait_ready()["model"])
        client = openai.OpenAI(base_url=f"{proc.base_url}/v1", api_key="x", max_retries=0)
        tool, think = dialogue(dialogues, "tool"), dialogue(dialogues, "think")
        response = client.chat.completions.create(
            model=model, messages=tool["messages"], tools=tool["tools"], temperature=0
        )
        calls = response.choices[0].message.tool_calls or []
        assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
            ("get_weather", {"city": "Paris"})
        ]
        message = (
            client.chat.completions.create(model=model, messages=think["messages"], temperature=0)
            .choices[0]
            .message
        )
        assert message.content == "The answer is 4."
        assert (message.model_extra or {})["reasoning_content"] == "2 plus 2 is 4."
    finally:
        assert proc.stop() == 0, proc.output()
