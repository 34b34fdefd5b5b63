"""Every tool-calling family end to end: native markup in, structured calls out (issue 22).

One ``sidelight serve`` over a home whose store holds the tiny family models
(``tests/models/build_tiny_family_models.py``: gpt-oss harmony, Qwen3-Coder XML, DeepSeek R1,
Gemma 4, Kimi K2 Thinking, GLM-4.6, whose template GenAI cannot render, Qwen3.5 and
Ministral 3 Reasoning, whose call history GenAI rewrites as JSON, Nemotron Nano v2, Granite 3.3,
DeepSeek V3.2 DSML, ByteDance Seed-OSS and MiniMax-M2, whose template GenAI cannot render
once tools are sent), each trained to print its family's native call and reasoning under
its real chat template. Each is driven
through the ``openai`` (whole and streamed), ``anthropic`` (whole and streamed) and ``ollama``
clients: the call comes back structured with arguments ``{"city": "Paris"}``, the reasoning
in the dialect's reasoning field, and no markup or stop token in any content; the tool-result
round trip gives the trained final answer; a forced ``tool_choice`` gives the call (held by
the family's own call grammar: ``test_family_grammars_e2e.py``). Tests are parametrized
over the families; the server is shared by the module. The Ollama messages carry no ids and
no ``tool_name``, as many Ollama clients send them.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import ollama
import openai
import pytest

from engine.settings import load_settings
from engine.store.manifest import Manifest, Source
from engine.store.store import ModelStore
from tests.server.harness import ServerProcess

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FAMILIES = (
    "gpt-oss",
    "qwen3-coder",
    "deepseek-r1",
    "gemma4",
    "kimi-k2",
    "glm-4.6",
    "qwen3.5",
    "ministral-3",
    "nemotron-nano-v2",
    "granite-3.3",
    "deepseek-v3.2",
    "seed-oss",
    "minimax-m2",
)
# Markup of every family, and their stop tokens: none may reach any content.
MARKUP = (
    "<|channel|>",
    "<|message|>",
    "<|call|>",
    "<|return|>",
    "<|end|>",
    "<|start|>",
    "<|constrain|>",
    "to=functions",
    "<tool_call>",
    "</tool_call>",
    "<function=",
    "<parameter=",
    "<think>",
    "</think>",
    "<｜",
    "｜>",
    "<|tool_call>",
    "<tool_call|>",
    "<|channel>",
    "<channel|>",
    "<|tool_response>",
    "<turn|>",
    "<|im_end|>",
    "<|endoftext|>",
    '<|"|>',
    "<|tool_calls_section",
    "<|tool_call",
    "<|im_",
    "<arg_key>",
    "<arg_value>",
    "<|observation|>",
    "<|user|>",
    "<tool_response>",
    "[THINK]",
    "[/THINK]",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
    "</s>",
    "<TOOLCALL>",
    "</TOOLCALL>",
    "<SPECIAL_",
    "<|tool_call|>",
    "<|end_of_text|>",
    "<|start_of_role|>",
    "DSML",
    "<function_results>",
    "<seed:",
    "</seed:",
    "<minimax:",
    "</minimax:",
    "<invoke",
    "</invoke>",
    "<parameter",
    "</parameter>",
    "]~b]",
    "]~!b[",
    "[e~[",
)


def _model_id(family: str) -> str:
    return f"family-{family}"


def _data(family: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (FIXTURES / f"family-{family}" / "dialogues.json").read_text(encoding="utf-8")
    )
    return data


def _messages(family: str, name: str) -> list[dict[str, Any]]:
    for d in _data(family)["dialogues"]:
        if d["name"] == name:
            messages: list[dict[str, Any]] = d["messages"]
            return messages
    raise KeyError(name)


def _openai_messages(family: str, name: str) -> list[dict[str, Any]]:
    """The dialogue as an OpenAI client sends it (arguments as a JSON string)."""
    out = []
    for original in _messages(family, name):
        message = original
        if message.get("tool_calls"):
            calls = [
                {
                    **c,
                    "function": {
                        **c["function"],
                        "arguments": json.dumps(c["function"]["arguments"]),
                    },
                }
                for c in message["tool_calls"]
            ]
            message = {**message, "tool_calls": calls}
        out.append(message)
    return out


def _expect(family: str, name: str) -> dict[str, Any]:
    expect: dict[str, Any] = _data(family)["expect"][name]
    return expect


def _thinking_kwargs(family: str) -> dict[str, Any]:
    """The request switches thinking on where the template has the switch (as trained)."""
    kwargs: dict[str, Any] = _data(family)["template_kwargs"]
    return {"chat_template_kwargs": kwargs} if kwargs else {}


def _clean(text: str | None) -> None:
    for marker in MARKUP:
        assert marker not in (text or ""), f"{marker!r} in content {text!r}"


def store_families(home: Path) -> None:
    """Put the family fixtures (:data:`FAMILIES`) into the model store under ``home``."""
    store = ModelStore(load_settings({"SIDELIGHT_HOME": str(home)}).paths.models_dir)
    store.root.mkdir(parents=True, exist_ok=True)
    for family in FAMILIES:
        source = FIXTURES / f"family-{family}"
        staged = store.root / f".staged-{family}"
        shutil.copytree(source, staged)
        store.commit(
            staged,
            Manifest(
                id=_model_id(family),
                name=_model_id(family),
                format="ir",
                entry=".",
                source=Source(kind="convert", path=str(source)),
                size_bytes=1,
            ),
        )


@pytest.fixture(scope="module")
def server(family_server: ServerProcess) -> ServerProcess:
    return family_server  # tests/server/conftest.py: the models load once for both modules


@pytest.fixture(scope="module")
def oai(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def claude(server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def olla(server: ServerProcess) -> Iterator[ollama.Client]:
    client = ollama.Client(host=server.base_url)
    yield client
    client._client.close()


family = pytest.mark.parametrize("family", FAMILIES)


# ---- OpenAI ------------------------------------------------------------------------------


def _chat(oai: openai.OpenAI, family: str, name: str, **extra: Any) -> Any:
    return oai.chat.completions.create(
        model=_model_id(family),
        messages=_openai_messages(family, name),  # type: ignore[arg-type]
        tools=_data(family)["tools"],
        temperature=0,
        extra_body=_thinking_kwargs(family),
        **extra,
    )


@family
def test_openai_tool_call(oai: openai.OpenAI, family: str) -> None:
    choice = _chat(oai, family, "tool").choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert [c.function.name for c in calls] == ["get_weather"]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert (
        getattr(choice.message, "reasoning_content", None) == _expect(family, "tool")["reasoning"]
    )
    assert not choice.message.content
    _clean(choice.message.content)


@family
def test_openai_streamed_tool_call(oai: openai.OpenAI, family: str) -> None:
    stream = _chat(oai, family, "tool", stream=True)
    content, reasoning, names, arguments, finish = "", "", [], "", None
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        content += delta.content or ""
        reasoning += getattr(delta, "reasoning_content", None) or ""
        for call in delta.tool_calls or []:
            if call.function and call.function.name:
                names.append(call.function.name)
            arguments += (call.function.arguments or "") if call.function else ""
        finish = choice.finish_reason or finish
    assert finish == "tool_calls"
    assert names == ["get_weather"]
    assert json.loads(arguments) == {"city": "Paris"}
    assert (reasoning or None) == _expect(family, "tool")["reasoning"]
    assert not content.strip()
    _clean(content)


@family
def test_openai_tool_result_round_trip(oai: openai.OpenAI, family: str) -> None:
    expect = _expect(family, "tool-result")
    message = _chat(oai, family, "tool-result").choices[0].message
    assert message.content == expect["content"]
    assert getattr(message, "reasoning_content", None) == expect["reasoning"]
    assert not message.tool_calls


@family
def test_openai_streamed_plain_answer(oai: openai.OpenAI, family: str) -> None:
    expect = _expect(family, "plain")
    content, reasoning = "", ""
    for chunk in _chat(oai, family, "plain", stream=True):
        if chunk.choices:
            content += chunk.choices[0].delta.content or ""
            reasoning += getattr(chunk.choices[0].delta, "reasoning_content", None) or ""
    assert content == expect["content"]
    assert (reasoning or None) == expect["reasoning"]


@family
def test_openai_forced_tool_choice(oai: openai.OpenAI, family: str) -> None:
    choice = _chat(
        oai, family, "tool", tool_choice={"type": "function", "function": {"name": "get_weather"}}
    ).choices[0]
    calls = choice.message.tool_calls or []
    assert [c.function.name for c in calls] == ["get_weather"]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    _clean(choice.message.content)


# ---- Anthropic ---------------------------------------------------------------------------


def _anthropic_tools(family: str) -> list[dict[str, Any]]:
    return [
        {
            "name": t["function"]["name"],
            "description": t["function"]["description"],
            "input_schema": t["function"]["parameters"],
        }
        for t in _data(family)["tools"]
    ]


def _anthropic_extra(family: str) -> dict[str, Any]:
    if not _data(family)["reasoning"]:
        return {}
    return {"thinking": {"type": "enabled", "budget_tokens": 1024}}


@family
def test_anthropic_tool_use(claude: anthropic.Anthropic, family: str) -> None:
    message = claude.messages.create(
        model=_model_id(family),
        max_tokens=2048,
        messages=[{"role": "user", "content": _messages(family, "tool")[0]["content"]}],
        tools=_anthropic_tools(family),  # type: ignore[arg-type]
        **_anthropic_extra(family),
    )
    assert message.stop_reason == "tool_use"
    uses = [b for b in message.content if b.type == "tool_use"]
    assert [(u.name, u.input) for u in uses] == [("get_weather", {"city": "Paris"})]
    thinking = [b.thinking for b in message.content if b.type == "thinking"]
    expected = _expect(family, "tool")["reasoning"]
    assert thinking == ([expected] if expected else [])
    for block in message.content:
        if block.type == "text":
            _clean(block.text)


@family
def test_anthropic_streamed_tool_use(claude: anthropic.Anthropic, family: str) -> None:
    """The stream's events (thinking, input_json deltas) add up to the same message."""
    with claude.messages.stream(
        model=_model_id(family),
        max_tokens=2048,
        messages=[{"role": "user", "content": _messages(family, "tool")[0]["content"]}],
        tools=_anthropic_tools(family),  # type: ignore[arg-type]
        **_anthropic_extra(family),
    ) as stream:
        message = stream.get_final_message()
    assert message.stop_reason == "tool_use"
    uses = [b for b in message.content if b.type == "tool_use"]
    assert [(u.name, u.input) for u in uses] == [("get_weather", {"city": "Paris"})]
    thinking = [b.thinking for b in message.content if b.type == "thinking"]
    expected = _expect(family, "tool")["reasoning"]
    assert thinking == ([expected] if expected else [])
    for block in message.content:
        if block.type == "text":
            _clean(block.text)


@family
def test_anthropic_tool_result_round_trip(claude: anthropic.Anthropic, family: str) -> None:
    data = _data(family)
    message = claude.messages.create(
        model=_model_id(family),
        max_tokens=2048,
        messages=[
            {"role": "user", "content": _messages(family, "tool")[0]["content"]},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_0",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_0",
                        "content": data["tool_result"],
                    }
                ],
            },
        ],
        tools=_anthropic_tools(family),  # type: ignore[arg-type]
        **_anthropic_extra(family),
    )
    expect = _expect(family, "tool-result")
    assert message.stop_reason == "end_turn"
    texts = [b.text for b in message.content if b.type == "text"]
    assert texts == [expect["content"]]
    thinking = [b.thinking for b in message.content if b.type == "thinking"]
    assert thinking == ([expect["reasoning"]] if expect["reasoning"] else [])


# ---- Ollama ------------------------------------------------------------------------------


def _ollama_think(family: str) -> bool | None:
    return True if _data(family)["reasoning"] else None


@family
def test_ollama_tool_call(olla: ollama.Client, family: str) -> None:
    response = olla.chat(
        model=_model_id(family),
        messages=_messages(family, "tool"),
        tools=_data(family)["tools"],
        think=_ollama_think(family),
        options={"temperature": 0},
    )
    calls = response.message.tool_calls or []
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert response.message.thinking == _expect(family, "tool")["reasoning"]
    assert not response.message.content
    _clean(response.message.content)


@family
def test_ollama_tool_result_round_trip(olla: ollama.Client, family: str) -> None:
    expect = _expect(family, "tool-result")
    response = olla.chat(
        model=_model_id(family),
        messages=_messages(family, "tool-result"),
        tools=_data(family)["tools"],
        think=_ollama_think(family),
        options={"temperature": 0},
    )
    assert response.message.content == expect["content"]
    assert response.message.thinking == expect["reasoning"]
    assert not response.message.tool_calls
