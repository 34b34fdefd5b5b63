"""End to end: ``sidelight serve`` on the tiny trained model, driven by the official ``openai`` SDK.

Everything is real: the server process, the engine worker process, OpenVINO inference and
the HTTP client. The model answers the prompts in ``tests/models/dialogues.json`` exactly
under greedy decoding, so replies are asserted character for character.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import dialogue
from tests.server.harness import ServerProcess, running_server
from tests.waiting import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("serve-home")
    with running_server(home, tiny_model) as proc:
        yield proc


def chat(client: openai.OpenAI, model: str, messages: list[dict[str, Any]], **kw: Any) -> Any:
    return client.chat.completions.create(model=model, messages=messages, temperature=0, **kw)


def tokenizer_count(text: str, tiny_model: Path) -> int:
    import openvino_genai as ov_genai

    tokenizer = ov_genai.Tokenizer(str(tiny_model))
    return len(tokenizer.encode(text, add_special_tokens=False).input_ids.data[0])


def test_models_lists_the_served_model(client: openai.OpenAI, model_id: str) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == [model_id]
    assert client.models.retrieve(model_id).id == model_id
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_non_stream_gives_the_trained_reply(
    client: openai.OpenAI, model_id: str, dialogues: dict[str, Any], tiny_model: Path
) -> None:
    hello = dialogue(dialogues, "hello")
    response = chat(client, model_id, hello["messages"])
    choice = response.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == hello["reply"]
    assert choice.finish_reason == "stop"
    assert response.usage is not None
    # The reply's tokens plus the end-of-turn token the model generated.
    assert response.usage.completion_tokens == tokenizer_count(hello["reply"], tiny_model) + 1
    assert response.usage.total_tokens == (
        response.usage.prompt_tokens + response.usage.completion_tokens
    )


def test_prompt_tokens_match_the_templated_prompt(
    client: openai.OpenAI, model_id: str, dialogues: dict[str, Any], tiny_model: Path
) -> None:
    import openvino_genai as ov_genai

    hello = dialogue(dialogues, "hello")
    tokenizer = ov_genai.Tokenizer(str(tiny_model))
    templated = tokenizer.apply_chat_template(hello["messages"], add_generation_prompt=True)
    expected = len(tokenizer.encode(templated, add_special_tokens=False).input_ids.data[0])
    response = chat(client, model_id, hello["messages"])
    assert response.usage is not None
    assert response.usage.prompt_tokens == expected


def test_stream_shape_and_text(
    client: openai.OpenAI, model_id: str, dialogues: dict[str, Any]
) -> None:
    hello = dialogue(dialogues, "hello")
    chunks = list(
        chat(
            client, model_id, hello["messages"], stream=True, stream_options={"include_usage": True}
        )
    )
    assert len({c.id for c in chunks}) == 1
    assert len({c.created for c in chunks}) == 1
    first, *_, finish, usage = chunks
    assert first.choices[0].delta.role == "assistant"
    assert not first.choices[0].delta.content
    assert finish.choices[0].finish_reason == "stop"
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert reasons.count("stop") == 1 and reasons[-1] == "stop"
    assert usage.choices == [] and usage.usage is not None
    assert all(c.usage is None for c in chunks[:-1])
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == hello["reply"]
    assert (
        usage.usage.completion_tokens
        == chat(client, model_id, hello["messages"]).usage.completion_tokens
    )


def test_stream_ends_with_done(
    server: ServerProcess, model_id: str, dialogues: dict[str, Any]
) -> None:
    hello = dialogue(dialogues, "hello")
    body = {"model": model_id, "messages": hello["messages"], "stream": True, "temperature": 0}
    with httpx.stream("POST", f"{server.base_url}/v1/chat/completions", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    assert all(line.startswith("data: ") for line in lines)


def test_multibyte_text_streams_whole_characters(
    client: openai.OpenAI, model_id: str, dialogues: dict[str, Any]
) -> None:
    item = dialogue(dialogues, "multibyte")
    pieces = [
        c.choices[0].delta.content or ""
        for c in chat(client, model_id, item["messages"], stream=True)
        if c.choices
    ]
    assert "".join(pieces) == item["reply"]
    assert all("\ufffd" not in p for p in pieces)
    assert chat(client, model_id, item["messages"]).choices[0].message.content == item["reply"]


def test_system_prompt_dialogue(
    client: openai.OpenAI, model_id: str, dialogues: dict[str, Any]
) -> None:
    for item in dialogues["dialogues"]:
        if item["name"].startswith("hello") and item["messages"][0]["role"] == "system":
            assert (
                chat(client, model_id, item["messages"]).choices[0].message.content == item["reply"]
            )
            return
    pytest.fail("dialogues.json has no system-prompt dialogue")


def test_text_content_parts(
    client: openai.OpenAI, model_id: str, dialogues: dict[str, Any]
) -> None:
    hello = dialogue(dialogues, "hello")
    messages = [
        {"role": m["role"], "content": [{"type": "text", "text": m["content"]}]}
        for m in hello["messages"]
    ]
    assert chat(client, model_id, messages).choices[0].message.content == hello["reply"]


def test_max_tokens_gives_length(
    client: openai.OpenAI, model_id: str, dialogues: dict[str, Any]
) -> None:
    count = dialogue(dialogues, "count")
    response = chat(client, model_id, count["messages"], max_completion_tokens=3)
    assert response.choices[0].finish_reason == "length"
    assert response.usage is not None and response.usage.completion_tokens == 3
    assert count["reply"].startswith(response.choices[0].message.content)


def test_stop_string_cuts_the_reply(
    client: openai.OpenAI, model_id: str, dialogues: dict[str, Any]
) -> None:
    count = dialogue(dialogues, "count")
    word = count["reply"].split()[3]
    response = chat(client, model_id, count["messages"], stop=[word])
    assert response.choices[0].finish_reason == "stop"
    assert response.choices[0].message.content == count["reply"][: count["reply"].index(word)]
    streamed = "".join(
        c.choices[0].delta.content or ""
        for c in chat(client, model_id, count["messages"], stop=word, stream=True)
        if c.choices
    )
    assert streamed == response.choices[0].message.content


def test_completions_endpoint(
    client: openai.OpenAI, model_id: str, dialogues: dict[str, Any]
) -> None:
    item = dialogues["completions"][0]
    response = client.completions.create(
        model=model_id, prompt=item["prompt"], temperature=0, max_tokens=24
    )
    assert response.choices[0].text.startswith(item["completion"])
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(
            model=model_id, prompt=item["prompt"], temperature=0, max_tokens=24, stream=True
        )
        if c.choices
    )
    assert streamed == response.choices[0].text
    echoed = client.completions.create(
        model=model_id, prompt=item["prompt"], temperature=0, max_tokens=24, echo=True
    )
    assert echoed.choices[0].text == item["prompt"] + response.choices[0].text


def test_sampling_with_seed_is_repeatable(
    client: openai.OpenAI, model_id: str, dialogues: dict[str, Any]
) -> None:
    hello = dialogue(dialogues, "hello")
    kwargs: dict[str, Any] = {
        "temperature": 1.5,
        "top_p": 0.95,
        "seed": 7,
        "max_tokens": 20,
        "extra_body": {"top_k": 50, "min_p": 0.01, "repetition_penalty": 1.1},
    }
    first = client.chat.completions.create(model=model_id, messages=hello["messages"], **kwargs)
    second = client.chat.completions.create(model=model_id, messages=hello["messages"], **kwargs)
    assert first.choices[0].message.content == second.choices[0].message.content


def test_unknown_fields_are_accepted(
    client: openai.OpenAI, model_id: str, dialogues: dict[str, Any]
) -> None:
    hello = dialogue(dialogues, "hello")
    response = chat(
        client,
        model_id,
        hello["messages"],
        extra_body={"some_plugin_field": {"x": 1}, "logit_bias": {}},
    )
    assert response.choices[0].message.content == hello["reply"]


def test_a_prompt_over_the_context_is_a_400_with_both_numbers(
    client: openai.OpenAI, model_id: str, server: ServerProcess
) -> None:
    """Only the prompt must fit; a large ``max_tokens`` is clipped (test_max_tokens_e2e)."""
    context = int(httpx.get(f"{server.base_url}/health").json()["context_length"])
    with pytest.raises(openai.BadRequestError, match="prompt has") as info:
        chat(client, model_id, [{"role": "user", "content": "word " * context}])
    message = info.value.body["message"]  # type: ignore[index]
    assert str(context) in message and "context length" in message
    assert info.value.body["code"] == "context_length_exceeded"  # type: ignore[index]


def test_n_other_than_one_is_refused(client: openai.OpenAI, model_id: str) -> None:
    with pytest.raises(openai.BadRequestError, match="n=1"):
        chat(client, model_id, [{"role": "user", "content": "Hello"}], n=2)


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        chat(client, "gpt-17", [{"role": "user", "content": "Hello"}])


def test_four_concurrent_streams_interleave(
    server: ServerProcess, model_id: str, dialogues: dict[str, Any]
) -> None:
    count = dialogue(dialogues, "count")

    async def one(aclient: openai.AsyncOpenAI, log: list[tuple[int, str]], n: int) -> str:
        stream = await aclient.chat.completions.create(
            model=model_id, messages=count["messages"], temperature=0, stream=True
        )
        text = []
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                log.append((n, "token"))
                text.append(chunk.choices[0].delta.content)
            if chunk.choices and chunk.choices[0].finish_reason:
                log.append((n, "finish"))
        return "".join(text)

    async def run() -> tuple[list[str], list[tuple[int, str]]]:
        log: list[tuple[int, str]] = []
        async with openai.AsyncOpenAI(base_url=f"{server.base_url}/v1", api_key="x") as aclient:
            texts = await asyncio.gather(*(one(aclient, log, n) for n in range(4)))
        return list(texts), log

    texts, log = asyncio.run(run())
    assert texts == [count["reply"]] * 4
    first_finish = next(i for i, (_, kind) in enumerate(log) if kind == "finish")
    started = {n for n, kind in log[:first_finish] if kind == "token"}
    assert started == {0, 1, 2, 3}


def _cancelled(server: ServerProcess) -> int:
    return int(server.health().json()["requests"]["cancelled"])


def _wait_cancelled(server: ServerProcess, count: int, timeout: float = 10) -> int:
    """Poll /health until the engine has reported ``count`` cancellations; then how many."""
    wait_until(lambda: _cancelled(server) >= count, f"{count} cancellations", timeout)
    return _cancelled(server)


def test_closing_a_stream_cancels_generation(
    server: ServerProcess, model_id: str, dialogues: dict[str, Any]
) -> None:
    count = dialogue(dialogues, "count")
    before = _cancelled(server)
    body = {
        "model": model_id,
        "messages": count["messages"],
        "stream": True,
        "temperature": 0,
        "ignore_eos": True,
        "max_tokens": 1000,
    }
    with httpx.stream("POST", f"{server.base_url}/v1/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                break  # got a token: hang up mid-generation
    assert _wait_cancelled(server, before + 1) == before + 1
    assert server.health().json()["requests"]["active"] == 0


def test_non_stream_disconnect_cancels_generation(
    server: ServerProcess, model_id: str, dialogues: dict[str, Any]
) -> None:
    count = dialogue(dialogues, "count")
    before = _cancelled(server)
    body = {
        "model": model_id,
        "messages": count["messages"],
        "temperature": 0,
        "ignore_eos": True,
        "max_tokens": 1500,
    }
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=0.5)
    assert _wait_cancelled(server, before + 1) == before + 1


def test_worker_crash_ends_stream_with_error_and_recovers(
    server: ServerProcess, client: openai.OpenAI, model_id: str, dialogues: dict[str, Any]
) -> None:
    count = dialogue(dialogues, "count")
    health = server.health().json()
    pid, restarts = int(health["worker_pid"]), int(health["restarts"])
    seen_states: list[str] = []
    stop_watch = threading.Event()

    def watch() -> None:
        while not stop_watch.is_set():
            try:
                seen_states.append(server.health().json()["status"])
            except httpx.HTTPError:
                seen_states.append("unreachable")
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    stream = chat(
        client,
        model_id,
        count["messages"],
        stream=True,
        max_tokens=1500,
        extra_body={"ignore_eos": True},
    )
    with pytest.raises(openai.APIError, match="stopped unexpectedly"):
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content and not watcher.is_alive():
                watcher.start()
                os.kill(pid, signal.SIGKILL)
    ready = server.wait_ready(timeout=120)
    stop_watch.set()
    watcher.join()
    assert "restarting" in seen_states or "loading" in seen_states
    assert "unreachable" not in seen_states
    assert ready["worker_pid"] != pid and ready["restarts"] == restarts + 1
    hello = dialogue(dialogues, "hello")
    assert chat(client, model_id, hello["messages"]).choices[0].message.content == hello["reply"]
    assert server.process.poll() is None


def test_foreign_host_is_403_on_the_real_server(server: ServerProcess) -> None:
    response = httpx.get(f"{server.base_url}/v1/models", headers={"Host": "attacker.example"})
    assert response.status_code == 403
    assert json.loads(response.text)["error"]["code"] == "host_not_allowed"
