"""End to end: a completion limit past the context is clipped to the room, in every dialect.

qwen-code sends ``max_tokens: 8000`` and retries with 64,000; on a model whose context is
smaller than that, Sidelight used to answer OpenAI's chat and completions with a 400
(``context_length_exceeded``) while llama-server, and Sidelight's own Anthropic route,
clipped the limit. Now every dialect's limit is an upper bound: the reply runs until the
context is full and ends with the dialect's "length" reason, its usage within the window.
A prompt that alone fills the context is still a 400 naming the context.

The shared server runs the demo model (2,048 tokens). The prompt is sized with the model's
own tokenizer to leave ``ROOM`` tokens, which the model fills (it never ends a reply to
this filler early), so each request generates a few tokens, not two thousand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.server.conftest import DEMO
from tests.server.harness import ServerProcess

pytestmark = pytest.mark.slow

ROOM = 12  # tokens the prompt leaves free in the context
QWEN_CODE_RETRY = 64_000  # what qwen-code asks for on its second try


@pytest.fixture(scope="module")
def context(server: ServerProcess) -> int:
    server.wait_ready()
    context: int = httpx.get(f"{server.base_url}/health").json()["context_length"]
    return context


@pytest.fixture(scope="module")
def filler(context: int, tiny_model: Path) -> tuple[str, int]:
    """A user message whose templated prompt leaves ``ROOM`` tokens, and that prompt's size."""
    import openvino_genai as ov_genai

    tokenizer = ov_genai.Tokenizer(str(tiny_model))

    def count(words: int) -> int:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "word " * words}], add_generation_prompt=True
        )
        return len(tokenizer.encode(text, add_special_tokens=False).input_ids.data[0])

    per_word = (count(200) - count(100)) / 100
    words = int((context - ROOM - count(100)) / per_word) + 100
    while count(words) > context - ROOM:
        words -= 1
    prompt = count(words)
    assert context - 2 * ROOM < prompt < context - ROOM // 2, (prompt, context)
    return "word " * words, prompt


def _user(filler: tuple[str, int]) -> Any:  # the SDK's message type, as JSON
    return [{"role": "user", "content": filler[0]}]


def test_chat_max_tokens_past_the_context_ends_at_length(
    client: openai.OpenAI, context: int, filler: tuple[str, int]
) -> None:
    reply = client.chat.completions.create(
        model=DEMO, messages=_user(filler), max_tokens=QWEN_CODE_RETRY, temperature=0
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == filler[1]
    assert reply.usage.prompt_tokens + reply.usage.completion_tokens == context


def test_chat_max_completion_tokens_streamed_ends_at_length(
    client: openai.OpenAI, context: int, filler: tuple[str, int]
) -> None:
    stream = client.chat.completions.create(
        model=DEMO,
        messages=_user(filler),
        max_completion_tokens=QWEN_CODE_RETRY,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    reasons = []
    usage = None
    for chunk in stream:
        reasons += [c.finish_reason for c in chunk.choices if c.finish_reason]
        usage = chunk.usage or usage
    assert reasons == ["length"]
    assert usage is not None and usage.total_tokens == context


def test_a_whole_window_reply_from_a_short_prompt(client: openai.OpenAI, context: int) -> None:
    """The case qwen-code hits: a short prompt, a limit far past the window; the reply fills
    the window (``ignore_eos`` keeps the model from ending it sooner)."""
    reply = client.chat.completions.create(
        model=DEMO,
        messages=[{"role": "user", "content": "Hello"}],
        max_tokens=QWEN_CODE_RETRY,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None
    assert reply.usage.total_tokens == context


def test_completions_max_tokens_past_the_context_ends_at_length(
    client: openai.OpenAI, context: int, filler: tuple[str, int]
) -> None:
    reply = client.completions.create(
        model=DEMO, prompt=filler[0], max_tokens=QWEN_CODE_RETRY, temperature=0
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None
    assert reply.usage.prompt_tokens + reply.usage.completion_tokens == context


def test_responses_max_output_tokens_past_the_context_is_incomplete(
    server: ServerProcess, context: int, filler: tuple[str, int]
) -> None:
    body = {
        "model": DEMO,
        "input": filler[0],
        "max_output_tokens": QWEN_CODE_RETRY,
        "temperature": 0,
        "store": False,
    }
    response = httpx.post(f"{server.base_url}/v1/responses", json=body, timeout=120)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["status"] == "incomplete"
    assert result["incomplete_details"] == {"reason": "max_output_tokens"}
    assert result["usage"]["input_tokens"] + result["usage"]["output_tokens"] == context


def test_anthropic_max_tokens_past_the_context_stops_at_the_window(
    server: ServerProcess, context: int, filler: tuple[str, int]
) -> None:
    body = {
        "model": DEMO,
        "max_tokens": QWEN_CODE_RETRY,
        "temperature": 0,
        "messages": _user(filler),
    }
    response = httpx.post(f"{server.base_url}/v1/messages", json=body, timeout=120)
    assert response.status_code == 200, response.text
    result = response.json()
    # Anthropic's own reason for a reply that filled the context before max_tokens.
    assert result["stop_reason"] == "model_context_window_exceeded"
    usage = result["usage"]  # the prompt is input_tokens and the cache reads together
    assert (
        usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["output_tokens"] == context
    )


def test_ollama_num_predict_past_the_context_is_done_at_length(
    server: ServerProcess, context: int, filler: tuple[str, int]
) -> None:
    body = {
        "model": DEMO,
        "messages": _user(filler),
        "stream": False,
        "options": {"num_predict": QWEN_CODE_RETRY, "temperature": 0},
    }
    response = httpx.post(f"{server.base_url}/api/chat", json=body, timeout=120)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["done_reason"] == "length"
    assert result["prompt_eval_count"] + result["eval_count"] == context


def test_lmstudio_max_output_tokens_past_the_context_fills_it(
    server: ServerProcess, context: int, filler: tuple[str, int]
) -> None:
    body = {
        "model": DEMO,
        "input": filler[0],
        "max_output_tokens": QWEN_CODE_RETRY,
        "temperature": 0,
        "store": False,
    }
    response = httpx.post(f"{server.base_url}/api/v1/chat", json=body, timeout=120)
    assert response.status_code == 200, response.text
    stats = response.json()["stats"]
    assert stats["input_tokens"] + stats["total_output_tokens"] == context


def test_a_prompt_that_alone_fills_the_context_is_a_400_naming_it(
    client: openai.OpenAI, context: int
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=DEMO,
            messages=[{"role": "user", "content": "word " * context}],
            max_tokens=QWEN_CODE_RETRY,
        )
    body: Any = info.value.body
    assert body["code"] == "context_length_exceeded" and body["param"] == "messages"
    assert f"maximum context length is {context} tokens" in body["message"]
    assert "prompt has" in body["message"]
