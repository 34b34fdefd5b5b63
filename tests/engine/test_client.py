"""EngineClient with a real engine worker process on the tiny model (no HTTP in between)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.models import ModelSpec, spec_from_path
from engine.settings import load_settings
from engine.supervisor.client import EngineClient
from engine.supervisor.states import ERROR, IDLE, READY, EngineUnavailable, RequestFailed
from engine.worker.messages import Finished, GenerationRequest, SamplingParams, TextDelta
from tests.conftest import dialogue

GREEDY = SamplingParams(temperature=0)


def make_client(home: Path, backend: str = "auto", interval_ms: int = 0) -> EngineClient:
    env = {"SIDELIGHT_HOME": str(home), "SIDELIGHT_STREAM_INTERVAL_MS": str(interval_ms)}
    settings = load_settings(env)
    settings.paths.ensure()
    return EngineClient(settings, backend=backend)


@pytest.fixture(params=["batched", "serial"])
def engine(
    request: pytest.FixtureRequest, sidelight_home: Path, tiny_model: Path
) -> Iterator[EngineClient]:
    client = make_client(sidelight_home, request.param)
    client.start()
    client.load(spec_from_path(tiny_model))
    status = client.wait_for({READY, ERROR}, 120)
    assert status.state == READY, status.message
    assert status.backend == request.param
    yield client
    client.close()


async def generate(engine: EngineClient, **kwargs: Any) -> tuple[str, Finished, list[str]]:
    stream = engine.submit(GenerationRequest(sampling=GREEDY, **kwargs))
    pieces: list[str] = []
    async for event in stream:
        if isinstance(event, TextDelta):
            pieces.append(event.text)
        else:
            pieces.append(event.text)
            return "".join(pieces), event, pieces
    raise AssertionError("stream ended without Finished")


async def test_the_stop_string_that_ended_a_reply_is_reported(
    engine: EngineClient, dialogues: dict[str, Any]
) -> None:
    count = dialogue(dialogues, "count")
    word = count["reply"].split()[3]
    text, result, _ = await generate(engine, messages=count["messages"], stop=("zzz", word))
    assert text == count["reply"][: count["reply"].index(word)]
    assert (result.finish_reason, result.stop_sequence) == ("stop", word)
    _, result, _ = await generate(engine, messages=count["messages"], stop=("zzz",))
    assert (result.finish_reason, result.stop_sequence) == ("stop", None)


async def test_exact_replies(engine: EngineClient, dialogues: dict[str, Any]) -> None:
    for name in ("hello", "multibyte", "count"):
        item = dialogue(dialogues, name)
        text, result, pieces = await generate(engine, messages=item["messages"])
        assert text == item["reply"], name
        assert result.finish_reason == "stop"
        assert all("\ufffd" not in p for p in pieces)
    assert engine.status().completed == 3


async def test_cancel_ends_the_request(engine: EngineClient, dialogues: dict[str, Any]) -> None:
    item = dialogue(dialogues, "count")
    stream = engine.submit(
        GenerationRequest(
            messages=item["messages"],
            max_tokens=1500,
            sampling=SamplingParams(temperature=0, ignore_eos=True),
        )
    )
    async for event in stream:
        if isinstance(event, TextDelta):
            stream.cancel()
        else:
            assert event.finish_reason == "cancelled"
            assert event.completion_tokens < 1500
    assert engine.status().cancelled == 1
    # The engine is free again.
    text, _, _ = await generate(engine, messages=dialogue(dialogues, "hello")["messages"])
    assert text == dialogue(dialogues, "hello")["reply"]


async def test_concurrent_requests_all_complete(
    engine: EngineClient, dialogues: dict[str, Any]
) -> None:
    names = ["hello", "multibyte", "count", "think"]
    results = await asyncio.gather(
        *(generate(engine, messages=dialogue(dialogues, n)["messages"]) for n in names)
    )
    assert [r[0] for r in results] == [dialogue(dialogues, n)["reply"] for n in names]


async def test_context_overflow_is_rejected(engine: EngineClient) -> None:
    context = engine.status().context_length
    assert context is not None
    stream = engine.submit(
        GenerationRequest(messages=[{"role": "user", "content": "word " * context}], max_tokens=4)
    )
    with pytest.raises(RequestFailed) as info:
        await stream.start()
    assert info.value.code == "context_length_exceeded" and info.value.param == "messages"
    assert str(context) in str(info.value)


async def test_max_tokens_past_the_context_is_clipped_to_it(engine: EngineClient) -> None:
    """``max_tokens`` is an upper bound in every dialect: too large is clipped, not refused."""
    context = engine.status().context_length
    assert context is not None
    stream = engine.submit(
        GenerationRequest(
            messages=[{"role": "user", "content": "Hello"}],
            max_tokens=context,
            sampling=SamplingParams(temperature=0, ignore_eos=True),
        )
    )
    async for event in stream:
        if isinstance(event, Finished):
            assert event.finish_reason == "length"
            assert event.prompt_tokens + event.completion_tokens == context
            return
    raise AssertionError("stream ended without Finished")


async def test_raw_completion(engine: EngineClient, dialogues: dict[str, Any]) -> None:
    item = dialogues["completions"][0]
    text, _, _ = await generate(engine, prompt=item["prompt"], max_tokens=len(item["completion"]))
    assert text.startswith(item["completion"])


async def kill_worker_mid_stream(client: EngineClient, dialogues: dict[str, Any]) -> Finished:
    """SIGKILL the worker once a long reply is streaming; return how the stream ended."""
    pid = client.status().worker_pid
    assert pid is not None
    stream = client.submit(
        GenerationRequest(
            messages=dialogue(dialogues, "count")["messages"],
            max_tokens=1500,
            sampling=SamplingParams(temperature=0, ignore_eos=True),
        )
    )
    async for event in stream:
        if isinstance(event, TextDelta):
            os.kill(pid, signal.SIGKILL)
        else:
            return event
    raise AssertionError("no Finished event")


def test_load_failure_is_reported(sidelight_home: Path, tmp_path: Path, tiny_model: Path) -> None:
    client = make_client(sidelight_home)
    client.start()
    try:
        broken = tmp_path / "broken"
        broken.mkdir()
        for name in (
            "openvino_model.xml",
            "openvino_model.bin",
            "openvino_tokenizer.xml",
            "openvino_detokenizer.xml",
        ):
            (broken / name).write_text("not a model")
        client.load(ModelSpec(id="broken", path=broken, format="ir"))
        status = client.wait_for({READY, ERROR}, 60)
        assert status.state == ERROR
        assert status.message and "could not load broken" in status.message
        with pytest.raises(EngineUnavailable):
            asyncio.run(_submit_hello(client))
        # The worker survived the failed load and can load a good model.
        client.load(spec_from_path(tiny_model))
        assert client.wait_for({READY, ERROR}, 120).state == READY
        client.unload()
        assert client.wait_for({IDLE}, 30).state == IDLE
    finally:
        client.close()


async def _submit_hello(client: EngineClient) -> None:
    client.submit(GenerationRequest(messages=[{"role": "user", "content": "Hello"}]))


def test_switch_to_gguf_and_back(
    sidelight_home: Path, tiny_model: Path, tiny_gguf: Path, dialogues: dict[str, Any]
) -> None:
    client = make_client(sidelight_home)
    client.start()
    try:
        hello = dialogue(dialogues, "hello")
        for path in (tiny_model, tiny_gguf, tiny_model):
            client.load(spec_from_path(path))
            status = client.wait_for({READY, ERROR}, 180)
            assert status.state == READY, status.message
            assert status.model is not None and status.model.path == path
            text, _, _ = asyncio.run(generate(client, messages=hello["messages"]))
            assert text == hello["reply"], path.name
    finally:
        client.close()


def test_restart_after_worker_is_killed(
    sidelight_home: Path, tiny_model: Path, dialogues: dict[str, Any]
) -> None:
    client = make_client(sidelight_home)
    client.start()
    try:
        client.load(spec_from_path(tiny_model))
        first = client.wait_for({READY}, 120)
        assert first.worker_pid is not None

        result = asyncio.run(kill_worker_mid_stream(client, dialogues))
        assert result.finish_reason == "error"
        assert result.error and "stopped unexpectedly" in result.error
        status = client.wait_for({READY, ERROR}, 120)
        assert status.state == READY and status.restarts == 1
        assert status.worker_pid != first.worker_pid and status.failed == 1
        hello = dialogue(dialogues, "hello")
        assert asyncio.run(generate(client, messages=hello["messages"]))[0] == hello["reply"]
    finally:
        client.close()


def test_reading_moves_to_the_event_loop_and_back(
    sidelight_home: Path, tiny_model: Path, dialogues: dict[str, Any]
) -> None:
    """A server's loop reads the pipe itself (no reader thread), across a worker crash, while
    another loop streams too, and hands reading back to a thread when it stops."""
    hello = dialogue(dialogues, "hello")
    client = make_client(sidelight_home)
    client.start()

    def reader_threads() -> list[str]:
        name = f"engine-reader-{client.status().worker_pid}"  # this client's, not others'
        return [t.name for t in threading.enumerate() if t.name == name]

    async def until_loop_reads() -> None:
        for _ in range(500):
            if client.reads_on == "loop":
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the loop never took over reading")

    async def scenario() -> None:
        client.read_on_loop()
        await until_loop_reads()
        assert reader_threads() == []
        assert (await generate(client, messages=hello["messages"]))[0] == hello["reply"]

        # Another loop (a chat window's) gets its events across threads.
        other = await asyncio.to_thread(
            lambda: asyncio.run(generate(client, messages=hello["messages"]))
        )
        assert other[0] == hello["reply"]

        ended = await kill_worker_mid_stream(client, dialogues)
        assert ended.finish_reason == "error"
        status = await asyncio.to_thread(client.wait_for, {READY, ERROR}, 120)
        assert status.state == READY and status.restarts == 1
        await until_loop_reads()  # the new worker's pipe is read by the loop too
        assert (await generate(client, messages=hello["messages"]))[0] == hello["reply"]

        client.read_on_thread()
        assert client.reads_on == "thread" and len(reader_threads()) == 1

    try:
        client.load(spec_from_path(tiny_model))
        assert client.wait_for({READY, ERROR}, 120).state == READY
        asyncio.run(scenario())
        # The loop is gone; the reader thread serves the next loop.
        assert asyncio.run(generate(client, messages=hello["messages"]))[0] == hello["reply"]
    finally:
        client.close()


@pytest.mark.parametrize("backend", ["batched", "serial"])
def test_fast_tokens_are_merged_but_the_first_goes_at_once(
    sidelight_home: Path, tiny_model: Path, dialogues: dict[str, Any], backend: str
) -> None:
    """With a stream interval, deltas closer together than it are merged: fewer wake-ups for
    the server and its client, the same text, and the first token is never held back."""
    interval = 0.05
    count = dialogue(dialogues, "count")["messages"]
    long_reply = SamplingParams(temperature=0, ignore_eos=True)

    async def run(client: EngineClient) -> tuple[str, list[tuple[float, TextDelta]], Finished]:
        deltas: list[tuple[float, TextDelta]] = []
        stream = client.submit(
            GenerationRequest(messages=count, max_tokens=600, sampling=long_reply)
        )
        async for event in stream:
            if isinstance(event, TextDelta):
                deltas.append((time.perf_counter(), event))
            else:
                return "".join(d.text for _, d in deltas) + event.text, deltas, event
        raise AssertionError("no Finished event")

    results = []
    for interval_ms in (0, int(interval * 1000)):
        client = make_client(sidelight_home, backend, interval_ms)
        client.start()
        try:
            client.load(spec_from_path(tiny_model))
            assert client.wait_for({READY, ERROR}, 120).state == READY
            results.append(asyncio.run(run(client)))
        finally:
            client.close()
    (every_text, every, every_end), (merged_text, merged, merged_end) = results
    assert merged_text == every_text and merged_end.completion_tokens == 600
    assert merged[0][1].tokens == 1  # the first token went alone, at once
    span = merged[-1][0] - merged[0][0]
    assert len(merged) <= span / interval + 3  # clock skew between processes: +1 slack
    assert len(merged) < len(every) / 4
    for deltas, end in ((every, every_end), (merged, merged_end)):
        assert 0 < sum(d.tokens for _, d in deltas) <= end.completion_tokens
