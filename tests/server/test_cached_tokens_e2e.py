"""End to end: prompt tokens found in the prefix cache, as every dialect reports them.

Real inference on the demo model through the ``openai`` and ``anthropic`` SDKs against the
shared ``sidelight serve``. A conversation opens with a system prompt no other test sends
(a fresh nonce as its first words, inside GenAI's first KV block), so its first turn finds
nothing cached; the second turn repeats the first turn's prompt and reply, and must find part
of that head cached: more than 0, at most the tokens the first turn computed (its prompt and
the reply tokens fed back), and fewer than its own prompt. The request log
(``/api/sidelight/requests``) must carry the same number as the usage. Captured Claude Code
and Codex sessions, replayed, must reuse the turn before the same way.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.server.harness import ServerProcess

pytestmark = pytest.mark.slow

MODEL = "sidelight-demo"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "plugin_requests"
# Long enough to fill several 32-token KV blocks (the demo tokenizer is near one token a
# character); the nonce in front makes the first block this conversation's own.
TOPIC = (
    "You are a helpful assistant for a small workshop. Answer briefly and plainly, name "
    "the tools you would use, and say when a job needs a second pair of hands."
)


def system_prompt() -> str:
    return f"{uuid.uuid4().hex} {TOPIC}"


@pytest.fixture
def client(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0) as c:
        yield c


@pytest.fixture
def claude(server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0) as c:
        yield c


def cached_metric(server: ServerProcess, dialect: str) -> float:
    """``sidelight_cached_prompt_tokens_total`` for the demo model in ``dialect``."""
    text = httpx.get(f"{server.base_url}/metrics", timeout=10).text
    labels = f'dialect="{dialect}",model="{MODEL}"'
    for line in text.splitlines():
        if line.startswith("sidelight_cached_prompt_tokens_total{") and labels in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def logged(server: ServerProcess, prompt_tokens: int, cached_tokens: int) -> None:
    """The request log has the newest finished request with these counts."""
    body = httpx.get(f"{server.base_url}/api/sidelight/requests", timeout=10).json()
    newest = max(body["data"], key=lambda e: e["id"])
    assert (newest["prompt_tokens"], newest["cached_tokens"]) == (prompt_tokens, cached_tokens)


def assert_second_turn(cached: int, prompt: int, first_prompt: int, first_reply: int) -> None:
    # More than nothing, no more than what the first turn computed (its prompt and all but
    # the last reply token, which is sampled and never fed back), less than the prompt.
    assert 0 < cached <= first_prompt + first_reply - 1
    assert cached < prompt


def test_openai_chat_reports_the_second_turn_cached(
    server: ServerProcess, client: openai.OpenAI
) -> None:
    messages: list[Any] = [
        {"role": "system", "content": system_prompt()},
        {"role": "user", "content": "Hello"},
    ]
    first = client.chat.completions.create(
        model=MODEL, messages=messages, temperature=0, max_tokens=16
    )
    assert first.usage is not None and first.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert first.usage.prompt_tokens > 64  # room for whole blocks in the shared head
    logged(server, first.usage.prompt_tokens, 0)

    messages += [
        {"role": "assistant", "content": first.choices[0].message.content or ""},
        {"role": "user", "content": "What is your name?"},
    ]
    before = cached_metric(server, "openai")
    stream = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        temperature=0,
        max_tokens=16,
        stream=True,
        stream_options={"include_usage": True},
    )
    (usage,) = [chunk.usage for chunk in stream if chunk.usage is not None]
    assert usage.prompt_tokens_details is not None
    cached = usage.prompt_tokens_details.cached_tokens or 0
    assert_second_turn(
        cached, usage.prompt_tokens, first.usage.prompt_tokens, first.usage.completion_tokens
    )
    logged(server, usage.prompt_tokens, cached)
    assert cached_metric(server, "openai") - before == cached
    # llama.cpp's timings split the prompt the same way (the whole answer carries them).
    again = client.chat.completions.create(
        model=MODEL, messages=messages, temperature=0, max_tokens=16
    )
    assert again.usage is not None and again.usage.prompt_tokens_details is not None
    timings = again.model_extra["timings"] if again.model_extra else {}
    reused = again.usage.prompt_tokens_details.cached_tokens or 0
    assert timings["cache_n"] == reused > 0
    assert timings["prompt_n"] == again.usage.prompt_tokens - reused


def test_openai_responses_reports_input_tokens_cached(client: openai.OpenAI) -> None:
    instructions = system_prompt()
    first = client.responses.create(
        model=MODEL, instructions=instructions, input="Hello", max_output_tokens=16
    )
    assert first.usage is not None
    assert first.usage.input_tokens_details.cached_tokens == 0
    again = client.responses.create(
        model=MODEL, instructions=instructions, input="Hello there", max_output_tokens=16
    )
    assert again.usage is not None
    cached = again.usage.input_tokens_details.cached_tokens
    # The second prompt shares the first one's head up to its user text, not its reply.
    assert 0 < cached <= first.usage.input_tokens - 1


def test_anthropic_messages_report_cache_reads(
    server: ServerProcess, claude: anthropic.Anthropic
) -> None:
    system = system_prompt()
    messages: list[Any] = [{"role": "user", "content": "Hello"}]
    first = claude.messages.create(model=MODEL, system=system, messages=messages, max_tokens=16)
    assert first.usage.cache_read_input_tokens == 0
    first_prompt = first.usage.input_tokens  # nothing cached: the whole prompt
    logged(server, first_prompt, 0)

    text = "".join(b.text for b in first.content if b.type == "text")
    messages += [
        {"role": "assistant", "content": text},
        {"role": "user", "content": "What is your name?"},
    ]
    with claude.messages.stream(
        model=MODEL, system=system, messages=messages, max_tokens=16
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    (start,) = [e for e in events if e.type == "message_start"]
    started = start.message.usage
    cached = started.cache_read_input_tokens or 0
    prompt = started.input_tokens + cached  # Anthropic counts cache reads apart
    assert_second_turn(cached, prompt, first_prompt, first.usage.output_tokens)
    # message_delta's cumulative usage (the SDK folds it into the final message) agrees.
    assert final.usage.cache_read_input_tokens == cached
    assert final.usage.input_tokens == started.input_tokens
    logged(server, prompt, cached)

    whole = claude.messages.create(model=MODEL, system=system, messages=messages, max_tokens=16)
    # The same prompt again: its whole 32-token blocks are found (GenAI's CPU block size;
    # the partly filled last one belonged to a longer sequence), never its last token.
    reread = whole.usage.cache_read_input_tokens or 0
    assert prompt - 32 < reread <= prompt - 1
    assert whole.usage.input_tokens + reread == prompt


@pytest.mark.parametrize(
    ("capture", "prompt_of", "cached_of", "output_of"),
    [
        (
            "claude_code_turns.json",
            lambda u: u["input_tokens"] + u["cache_read_input_tokens"],
            lambda u: u["cache_read_input_tokens"],
            lambda u: u["output_tokens"],
        ),
        (
            "codex_turns.json",
            lambda u: u["input_tokens"],
            lambda u: u["input_tokens_details"]["cached_tokens"],
            lambda u: u["output_tokens"],
        ),
    ],
)
def test_captured_agent_turns_reuse_the_turn_before(
    server: ServerProcess,
    capture: str,
    prompt_of: Callable[[dict[str, Any]], int],
    cached_of: Callable[[dict[str, Any]], int],
    output_of: Callable[[dict[str, Any]], int],
) -> None:
    """Claude Code's and Codex's own three-turn sessions (tests/fixtures/plugin_requests),
    replayed: every later turn finds at least the earlier prompt's whole 32-token blocks,
    and no more than what the turn before computed (its prompt and reply but the last
    token). Whole, not streamed, so the usage is one object."""
    requests = json.loads((FIXTURES / capture).read_text(encoding="utf-8"))["requests"]
    usages = []
    for recorded in requests:
        body = {**json.loads(recorded["body"]), "stream": False}
        response = httpx.post(f"{server.base_url}{recorded['path']}", json=body, timeout=120)
        assert response.status_code == 200, response.text
        usages.append(response.json()["usage"])
    for before, after in itertools.pairwise(usages):
        computed = prompt_of(before) + output_of(before) - 1
        assert prompt_of(before) - 32 < cached_of(after) <= computed
        assert cached_of(after) < prompt_of(after)
