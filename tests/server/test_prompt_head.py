"""An agent's next turn renders to the same prompt head, so the prefix cache can serve it.

GenAI's prefix cache reuses the KV blocks of a prompt's head only while every token up to
them is the same (engine.worker.prefix_ledger). Agents resend the whole conversation each
turn with per-request changes: Claude Code moves its ``cache_control`` markers to the newest
turn, turns a string ``content`` into blocks, and sends mid-conversation ``system`` turns,
some cleared at the next user message. None of that may change the rendered prompt before
the new turn. These tests translate real requests (``claude_code_turns.json``, a three-turn
``claude -p`` / ``--continue`` session captured from Claude Code 2.1.332) as the server does,
render them with the demo model's chat template and tokenizer as the worker does
(:func:`engine.worker.prepare.prepare`), and compare token ids.
"""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

import openvino_genai as ov_genai
import pytest

from engine.server.anthropic import protocol, translate
from engine.server.pipeline.plan import engine_request, plan_request
from engine.server.responses import protocol as responses
from engine.server.responses import translate as responses_translate
from engine.worker.prepare import prepare

ROOT = Path(__file__).resolve().parents[2]
TURNS = ROOT / "tests" / "fixtures" / "plugin_requests" / "claude_code_turns.json"


@pytest.fixture(scope="module")
def tokenizer(tiny_model: Path) -> Any:
    return ov_genai.Tokenizer(str(tiny_model))


@pytest.fixture(scope="module")
def turns() -> list[dict[str, Any]]:
    requests = json.loads(TURNS.read_text(encoding="utf-8"))["requests"]
    return [json.loads(r["body"]) for r in requests if r["method"] == "POST"]


def prompt_ids(body: dict[str, Any], tokenizer: Any) -> list[int]:
    """The token ids the worker gives GenAI for a Messages request body: translated,
    planned and made the worker's request as the server does, then prepared."""
    generate = translate.generate_request(protocol.MessagesRequest.model_validate(body))
    plan = plan_request(generate, tokenizer.chat_template)
    request = engine_request(generate, plan)
    config = ov_genai.GenerationConfig()
    return list(prepare(request, tokenizer, config, None).prompt_ids)


def shared(a: list[int], b: list[int]) -> int:
    """How many leading ids ``a`` and ``b`` share."""
    count = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        count += 1
    return count


def test_each_captured_turn_starts_with_the_previous_turns_prompt(
    turns: list[dict[str, Any]], tokenizer: Any
) -> None:
    assert len(turns) == 3
    # What changed between the captured turns: markers and content shapes, not the text.
    assert turns[0]["messages"][0]["content"] == "Hello"
    assert turns[1]["messages"][0]["content"] == "Hello"
    assert "cache_control" in turns[1]["messages"][-1]["content"][0]
    assert isinstance(turns[0]["messages"][1]["content"], list)  # the system turn: blocks,
    assert isinstance(turns[1]["messages"][1]["content"], str)  # then a string
    ids = [prompt_ids(body, tokenizer) for body in turns]
    for earlier, later in itertools.pairwise(ids):
        # The whole earlier prompt (it ends with the assistant header) heads the later one.
        assert later[: len(earlier)] == earlier
        assert len(later) > len(earlier)


def with_system_turn(body: dict[str, Any], text: str, clear_at: str | None) -> dict[str, Any]:
    """``body`` with a mid-conversation system turn after its last user turn, as Claude
    Code's prompt says it sends ("updates, reminders, or modifications to rules via
    mid-conversation system turns"); derived from the capture, not captured."""
    changed = copy.deepcopy(body)
    turn: dict[str, Any] = {"role": "system", "content": text}
    if clear_at is not None:
        turn["clear_at"] = clear_at
    changed["messages"].append(turn)
    return changed


@pytest.mark.parametrize("clear_at", [None, "next_user_message"])
def test_a_mid_conversation_system_turn_leaves_the_head_alone(
    turns: list[dict[str, Any]], tokenizer: Any, clear_at: str | None
) -> None:
    before = prompt_ids(turns[1], tokenizer)
    noted = with_system_turn(turns[1], "The user switched to plan mode.", clear_at)
    after = prompt_ids(noted, tokenizer)
    # Everything up to the newest user turn's text is the same prompt: the note comes after.
    head = shared(before, after)
    assert tokenizer.decode(before[:head]).endswith("And again")
    text = tokenizer.decode(after)
    assert "<system-reminder>\nThe user switched to plan mode.\n</system-reminder>" in text
    assert text.index("The user switched") > text.index("And again")
    # The next turn: a cleared note is gone, a kept one stays where it was; either way the
    # prompt up to it is unchanged.
    third = copy.deepcopy(turns[2])
    if clear_at is None:
        third["messages"].insert(4, noted["messages"][-1])
    later = prompt_ids(third, tokenizer)
    kept = shared(after, later)
    assert kept >= head
    if clear_at is None:  # the note itself is part of the shared head now
        assert "The user switched" in tokenizer.decode(later[:kept])


def test_system_turns_before_the_first_reply_still_open_the_prompt(
    turns: list[dict[str, Any]], tokenizer: Any
) -> None:
    """Claude Code's environment turn follows the first user turn; it stays in the leading
    system message (templates take a system message only first), where every later turn
    has it too."""
    text = tokenizer.decode(prompt_ids(turns[2], tokenizer))
    assert text.index("# Environment") < text.index("Hello")


def test_codex_ids_and_metadata_do_not_reach_the_prompt() -> None:
    """Codex (``codex.json``, 0.171.0) gives every input item an ``id`` and every request a
    fresh ``prompt_cache_key`` and ``client_metadata`` (turn ids, a start time); none of it
    may reach the template."""
    capture = ROOT / "tests" / "fixtures" / "plugin_requests" / "codex.json"
    for recorded in json.loads(capture.read_text(encoding="utf-8"))["requests"]:
        body = json.loads(recorded["body"])
        again = copy.deepcopy(body)
        for number, item in enumerate(again["input"]):
            if "id" in item:
                item["id"] = f"msg_other-{number}"
        again["prompt_cache_key"] = "another-key"
        again["client_metadata"] = {"turn_id": "another-turn", "turn_started_at_unix_ms": "1"}
        first = responses_translate.translate(responses.ResponsesRequest.model_validate(body))
        second = responses_translate.translate(responses.ResponsesRequest.model_validate(again))
        assert first.request.messages == second.request.messages
        assert first.request.tools == second.request.tools


def test_loading_a_deferred_tool_leaves_the_head_alone(tokenizer: Any) -> None:
    """Claude Code's ToolSearch adds the loaded tool to ``tools`` (in name order, marked
    ``defer_loading``) and names it in a ``tool_reference``: the template keeps listing the
    tools offered from the start, and the loaded one is described in the tool result."""
    capture = ROOT / "tests" / "fixtures" / "plugin_requests" / "claude_code_tool_search.json"
    search, loaded = (
        json.loads(r["body"]) for r in json.loads(capture.read_text(encoding="utf-8"))["requests"]
    )
    names = [t["name"] for t in loaded["tools"]]
    assert "WebFetch" not in [t["name"] for t in search["tools"]]
    assert names.index("WebFetch") < len(names) - 1  # added in the middle of the list
    before, after = prompt_ids(search, tokenizer), prompt_ids(loaded, tokenizer)
    assert after[: len(before)] == before  # the whole first prompt heads the next
    text = tokenizer.decode(after[len(before) :])
    assert 'Tool loaded: WebFetch\n{"type": "function", "function": {"name": "WebFetch"' in text
    request = translate.generate_request(protocol.MessagesRequest.model_validate(loaded))
    assert request.tools[-1]["function"]["name"] == "WebFetch"  # callable all the same
    assert request.listed_tools == len(request.tools) - 1


def responses_ids(body: dict[str, Any], tokenizer: Any) -> list[int]:
    """The token ids the worker gives GenAI for a Responses request body (no history)."""
    generate = responses_translate.translate(responses.ResponsesRequest.model_validate(body))
    plan = plan_request(generate.request, tokenizer.chat_template)
    request = engine_request(generate.request, plan)
    return list(prepare(request, tokenizer, ov_genai.GenerationConfig(), None).prompt_ids)


def test_each_captured_codex_turn_starts_with_the_previous_turns_prompt(tokenizer: Any) -> None:
    """``codex_turns.json``: Codex 0.171.0 resends every item, with new request ids and
    metadata each turn; each turn's prompt heads the next one whole."""
    capture = ROOT / "tests" / "fixtures" / "plugin_requests" / "codex_turns.json"
    bodies = [json.loads(r["body"]) for r in json.loads(capture.read_text("utf-8"))["requests"]]
    assert len(bodies) == 3
    assert bodies[0]["client_metadata"] != bodies[1]["client_metadata"]
    ids = [responses_ids(body, tokenizer) for body in bodies]
    for earlier, later in itertools.pairwise(ids):
        assert later[: len(earlier)] == earlier
        assert len(later) > len(earlier)
