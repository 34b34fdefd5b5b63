"""Forced and lazy call grammars in each family's own syntax, end to end (issue 22).

The tiny family models of ``test_families_e2e.py`` (gpt-oss harmony, Qwen3-Coder XML,
DeepSeek R1, Gemma 4, Kimi K2 Thinking, GLM-4.6, Qwen3.5, Nemotron Nano v2, Ministral 3 (whose
call grammar is its ``[TOOL_CALLS]name[ARGS]`` form, not the v3 JSON array), Granite 3.3,
DeepSeek V3.2 DSML, Seed-OSS and MiniMax-M2; each trained on one ``get_weather(city)`` call
under its real template) behind one ``sidelight serve``, driven through the ``openai``
SDK (whole and streamed) and the ``anthropic`` SDK. What shows that the grammar, not the
model, made the call:

* the capital-of-France question, which every model answers in text under ``auto`` (checked
  in the same test), comes back as a ``get_weather`` call when ``tool_choice`` forces one;
* offered a ``city`` restricted to ``["London"]``, the models (trained on Paris) write
  ``{"city": "London"}`` when forced, and under ``auto`` once they open a call (the lazy
  grammar). Gemma 4's tiny model answers in text under that prompt, so it has no lazy case.

Arguments are checked against the tool's schema (``tests/schema_check.conforms``), and no
family markup may reach content. A schema a family's notation cannot hold (a nested object
for Gemma 4) runs unconstrained and still answers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.schema_check import conforms
from tests.server.harness import ServerProcess
from tests.server.test_families_e2e import (
    FAMILIES,
    _anthropic_extra,
    _clean,
    _data,
    _messages,
    _model_id,
    _openai_messages,
    _thinking_kwargs,
)

pytestmark = pytest.mark.slow

LONDON_ONLY: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city name.", "enum": ["London"]}
            },
            "required": ["city"],
        },
    },
}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
# Gemma 4's tiny model answers in text under the London-only tool: no call to hold.
LAZY_FAMILIES = tuple(f for f in FAMILIES if f != "gemma4")


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


family = pytest.mark.parametrize("family", FAMILIES)


def _chat(oai: openai.OpenAI, family: str, name: str, **extra: Any) -> Any:
    extra.setdefault("tools", _data(family)["tools"])
    return oai.chat.completions.create(
        model=_model_id(family),
        messages=_openai_messages(family, name),  # type: ignore[arg-type]
        temperature=0,
        max_tokens=200,
        extra_body=_thinking_kwargs(family),
        **extra,
    )


def _streamed(oai: openai.OpenAI, family: str, name: str, **extra: Any) -> tuple[Any, ...]:
    """(content, call names, concatenated arguments, finish reason) of a streamed reply."""
    content, names, arguments, finish = "", [], "", None
    for chunk in _chat(oai, family, name, stream=True, **extra):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        for call in choice.delta.tool_calls or []:
            if call.function and call.function.name:
                names.append(call.function.name)
            arguments += (call.function.arguments or "") if call.function else ""
        finish = choice.finish_reason or finish
    return content, names, arguments, finish


def _one_call(choice: Any, tool: dict[str, Any]) -> dict[str, Any]:
    """The reply's single call, checked: structured, named, arguments valid for ``tool``."""
    assert choice.finish_reason == "tool_calls", choice
    calls = choice.message.tool_calls or []
    assert [c.function.name for c in calls] == ["get_weather"], choice.message
    arguments: dict[str, Any] = json.loads(calls[0].function.arguments)
    assert conforms(tool["function"]["parameters"], arguments), arguments
    _clean(choice.message.content)
    return arguments


@family
def test_forced_call_where_the_model_would_answer(oai: openai.OpenAI, family: str) -> None:
    auto = _chat(oai, family, "plain").choices[0]
    assert auto.finish_reason == "stop" and not auto.message.tool_calls  # it answers in text
    tool = _data(family)["tools"][0]
    for choice in ("required", NAMED):
        forced = _chat(oai, family, "plain", tool_choice=choice, parallel_tool_calls=False)
        _one_call(forced.choices[0], tool)


@family
def test_streamed_forced_call_where_the_model_would_answer(oai: openai.OpenAI, family: str) -> None:
    content, names, arguments, finish = _streamed(
        oai, family, "plain", tool_choice="required", parallel_tool_calls=False
    )
    assert (finish, names) == ("tool_calls", ["get_weather"])
    assert conforms(_data(family)["tools"][0]["function"]["parameters"], json.loads(arguments))
    assert not content.strip()
    _clean(content)


@family
def test_forced_arguments_follow_the_schema_not_the_training(
    oai: openai.OpenAI, family: str
) -> None:
    forced = _chat(oai, family, "tool", tools=[LONDON_ONLY], tool_choice=NAMED)
    assert _one_call(forced.choices[0], LONDON_ONLY) == {"city": "London"}
    content, names, arguments, finish = _streamed(
        oai, family, "tool", tools=[LONDON_ONLY], tool_choice=NAMED
    )
    assert (finish, names, json.loads(arguments)) == (
        "tool_calls",
        ["get_weather"],
        {"city": "London"},
    )
    _clean(content)


@pytest.mark.parametrize("family", LAZY_FAMILIES)
def test_auto_holds_an_opened_call_to_the_schema(oai: openai.OpenAI, family: str) -> None:
    """The lazy grammar: free text (reasoning) until the family's call trigger, then the call
    must match the tools; the trained ``Paris`` is not in the enum."""
    whole = _chat(oai, family, "tool", tools=[LONDON_ONLY], parallel_tool_calls=False)
    assert _one_call(whole.choices[0], LONDON_ONLY) == {"city": "London"}
    content, names, arguments, finish = _streamed(
        oai, family, "tool", tools=[LONDON_ONLY], parallel_tool_calls=False
    )
    assert (finish, names, json.loads(arguments)) == (
        "tool_calls",
        ["get_weather"],
        {"city": "London"},
    )
    _clean(content)


@family
def test_anthropic_tool_choice_any_and_tool(claude: anthropic.Anthropic, family: str) -> None:
    schema = _data(family)["tools"][0]["function"]["parameters"]
    tool: Any = {"name": "get_weather", "description": "Get the weather.", "input_schema": schema}
    choices: list[Any] = [
        {"type": "any", "disable_parallel_tool_use": True},
        {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
    ]
    for choice in choices:
        message = claude.messages.create(
            model=_model_id(family),
            max_tokens=300,
            messages=[{"role": "user", "content": _messages(family, "plain")[0]["content"]}],
            tools=[tool],
            tool_choice=choice,
            **_anthropic_extra(family),
        )
        assert message.stop_reason == "tool_use", message
        uses = [b for b in message.content if b.type == "tool_use"]
        assert [u.name for u in uses] == ["get_weather"]
        assert conforms(schema, uses[0].input), uses[0].input
        for block in message.content:
            if block.type == "text":
                _clean(block.text)


def test_a_schema_the_notation_cannot_hold_runs_unconstrained(oai: openai.OpenAI) -> None:
    """Gemma 4's grammar covers flat string/number/boolean parameters; for a nested object
    the forced call is left unconstrained (``Unconstrained.SCHEMA_NOTATION``, logged) and
    the request is still answered, with what the model writes: under this untrained tool
    list the tiny model answers in text, which a grammar would not have allowed."""
    nested = json.loads(json.dumps(_data("gemma4")["tools"][0]))
    nested["function"]["parameters"]["properties"]["where"] = {
        "type": "object",
        "properties": {"lat": {"type": "number"}},
    }
    choice = _chat(oai, "gemma4", "tool", tools=[nested], tool_choice="required").choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert choice.message.content  # (untrained text: stray markup is the model's, not checked)
    held = _chat(oai, "gemma4", "tool", tool_choice="required").choices[0]  # the flat schema
    assert held.finish_reason == "tool_calls"
