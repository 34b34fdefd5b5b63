"""The replayed agent sessions (``bench/agent_sessions.py``) are what the agents would send.

The replay benchmark builds turns 3-5 of a Claude Code session and turns 2-5 of a Codex
session from real captures. These tests check the built turns without any server: each is
a request Sidelight accepts, tool calls and results pair up, only the newest Claude Code
block carries ``cache_control``, and each turn's prompt, rendered as the worker renders it
(the tiny model's template and tokenizer), heads the next turn's whole, as a real agent's
growing conversation does.
"""

from __future__ import annotations

import itertools
from typing import Any

import openvino_genai as ov_genai
import pytest

from bench import agent_sessions
from engine.server.anthropic import protocol
from engine.server.responses import protocol as responses
from tests.server.test_prompt_head import prompt_ids, responses_ids


@pytest.fixture(scope="module")
def tokenizer(tiny_model: Any) -> Any:
    return ov_genai.Tokenizer(str(tiny_model))


def test_claude_session_keeps_the_captured_turns_and_grows_by_tool_rounds() -> None:
    captured = agent_sessions.load_bodies("claude_code_tool_search.json")
    turns = agent_sessions.session("claude", 5, 64)
    assert len(turns) == 5
    for built, real in zip(turns[:2], captured, strict=True):
        assert {k: v for k, v in built.items() if k not in ("max_tokens", "temperature")} == {
            k: v for k, v in real.items() if k != "max_tokens"
        }
    for body in turns:
        assert body["max_tokens"] == 64 and body["temperature"] == 0
        protocol.MessagesRequest.model_validate(body)
    for earlier, later in itertools.pairwise(turns):
        assert len(later["messages"]) == len(earlier["messages"]) + 2  # a call, its result
        assert later["system"] == earlier["system"]
    for body in turns[2:]:
        call, result = body["messages"][-2], body["messages"][-1]
        assert call["role"] == "assistant" and result["role"] == "user"
        assert call["content"][0]["id"] == result["content"][0]["tool_use_id"]
        assert len(result["content"][0]["content"]) > 500  # a real tool output's size
        marked = [
            block
            for message in body["messages"]
            if isinstance(message["content"], list)
            for block in message["content"]
            if "cache_control" in block
        ]
        assert marked == [result["content"][0]]
        assert body["tools"] == turns[1]["tools"]


def test_codex_session_grows_by_function_calls() -> None:
    turns = agent_sessions.session("codex", 5, 64)
    assert len(turns) == 5
    assert turns[0]["input"] == agent_sessions.load_bodies("codex.json", ("default",))[0]["input"]
    for earlier, later in itertools.pairwise(turns):
        assert later["input"][: len(earlier["input"])] == earlier["input"]
        call, output = later["input"][-2:]
        assert call["type"] == "function_call" and output["type"] == "function_call_output"
        assert call["call_id"] == output["call_id"]
    for body in turns:
        assert body["max_output_tokens"] == 64 and body["temperature"] == 0
        responses.ResponsesRequest.model_validate(body)


def test_more_turns_than_scripted_is_refused() -> None:
    with pytest.raises(ValueError, match="turns must be"):
        agent_sessions.session("codex", 6, 64)


def test_each_built_claude_turn_starts_with_the_previous_turns_prompt(tokenizer: Any) -> None:
    ids = [prompt_ids(body, tokenizer) for body in agent_sessions.session("claude", 5, 64)]
    for earlier, later in itertools.pairwise(ids):
        assert later[: len(earlier)] == earlier
        assert len(later) > len(earlier) + 100


def test_each_built_codex_turn_starts_with_the_previous_turns_prompt(tokenizer: Any) -> None:
    ids = [responses_ids(body, tokenizer) for body in agent_sessions.session("codex", 5, 64)]
    for earlier, later in itertools.pairwise(ids):
        assert later[: len(earlier)] == earlier
        assert len(later) > len(earlier) + 100
