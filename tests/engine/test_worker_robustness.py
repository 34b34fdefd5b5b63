"""One request never takes the engine worker (or the other requests) down with it.

Real worker processes on the tiny models: values C++ cannot take, text that is not Unicode,
grammars XGrammar cannot compile, and a big embedding batch beside a chat stream.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from multiprocessing import Pipe
from pathlib import Path
from typing import Any

import pytest

from engine.models import ModelSpec, spec_from_path
from engine.supervisor.client import EngineClient
from engine.supervisor.states import ERROR, READY, RequestFailed
from engine.worker.messages import (
    Event,
    Finished,
    GenerationRequest,
    LoadModel,
    ModelLoaded,
    OutputConstraint,
    RequestAccepted,
    RequestRejected,
    SamplingParams,
    Shutdown,
    Submit,
    TextDelta,
)
from engine.worker.process import Worker
from tests.conftest import ROOT, dialogue
from tests.engine.chat_beside import assert_chat_went_on, chat_beside
from tests.engine.test_client import generate, make_client

TINY_EMBED = ROOT / "tests" / "fixtures" / "tiny-embed"
HELLO = [{"role": "user", "content": "Hello"}]
LONG = SamplingParams(temperature=0, ignore_eos=True)

# Schemas XGrammar cannot compile; each used to end every stream and reload the model.
BAD_SCHEMAS: dict[str, Any] = {
    "empty enum": {"enum": []},
    "minimum above maximum": {"type": "integer", "minimum": 5, "maximum": 1},
    "lookahead pattern": {"type": "string", "pattern": "(?=a)"},
    "bad patternProperties": {"type": "object", "patternProperties": {"(": {"type": "string"}}},
    "infinite bound": {"type": "number", "minimum": float("inf")},
    "missing $ref": {"$ref": "#/$defs/nope"},
    "minLength above maxLength": {"type": "string", "minLength": 5, "maxLength": 1},
}


def _client(home: Path, backend: str = "batched") -> EngineClient:
    client = make_client(home, backend)
    client.start()
    client.load(spec_from_path(ROOT / "resources" / "models" / "sidelight-demo"))
    status = client.wait_for({READY, ERROR}, 120)
    assert status.state == READY, status.message
    return client


@pytest.fixture(scope="module", params=["batched", "serial"])
def engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EngineClient]:
    client = _client(tmp_path_factory.mktemp("home"), request.param)
    yield client
    client.close()


def _assert_short(message: str) -> None:
    """A client-facing message: no library source paths, check expressions or traces."""
    for leak in (".cc:", ".cpp:", "Traceback", "/home/", "Check '"):
        assert leak not in message, message


async def _refusal(client: EngineClient, **kwargs: Any) -> RequestFailed:
    stream = client.submit(GenerationRequest(**kwargs))
    with pytest.raises(RequestFailed) as info:
        await stream.start()
    _assert_short(str(info.value))
    return info.value


ODD_REQUESTS: list[tuple[dict[str, Any], str]] = [
    ({"sampling": SamplingParams(temperature=1.0, seed=2**64)}, "seed"),
    ({"sampling": SamplingParams(temperature=float("nan"))}, "temperature"),
    ({"sampling": SamplingParams(temperature=1.0, top_p=float("inf"))}, "top_p"),
    ({"max_tokens": -1}, "max_tokens"),
    ({"max_tokens": 2**64}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "Hi \ud800"}]}, "messages"),
    ({"messages": None, "prompt": "Hi \ud800"}, "prompt"),
    ({"messages": None, "prompt": "def f(", "suffix": "\udfff)"}, "suffix"),
    ({"stop": ("\ud800",)}, "stop"),
    ({"tools": [{"type": "function", "function": {"name": "f\ud800"}}]}, "tools"),
]


async def test_odd_values_are_refused_alone(
    engine: EngineClient, dialogues: dict[str, Any]
) -> None:
    """Each becomes that request's 400-class refusal naming the field; the worker lives on."""
    before = engine.status()
    for extra, param in ODD_REQUESTS:
        kwargs: dict[str, Any] = {"messages": HELLO, "max_tokens": 5, **extra}
        refusal = await _refusal(engine, **kwargs)
        assert (refusal.code, refusal.param) == ("invalid_request", param), refusal
    # Values that mean something else in GenAI's types are mapped, not refused.
    for sampling in (
        SamplingParams(temperature=1.0, seed=-1),  # random, as OpenAI's and llama.cpp's -1
        SamplingParams(temperature=1.0, top_k=2**64),  # beyond any vocabulary: no limit
        SamplingParams(temperature=1.0, top_k=-1),  # Ollama/llama.cpp: no limit
    ):
        stream = engine.submit(GenerationRequest(messages=HELLO, max_tokens=5, sampling=sampling))
        async for event in stream:
            if isinstance(event, Finished):
                assert event.finish_reason in ("stop", "length"), event
    after = engine.status()
    assert after.worker_pid == before.worker_pid and after.restarts == 0
    assert after.active_requests == 0
    hello = dialogue(dialogues, "hello")
    assert (await generate(engine, messages=hello["messages"]))[0] == hello["reply"]


async def test_negative_seed_means_random(engine: EngineClient) -> None:
    async def sample() -> str:
        stream = engine.submit(
            GenerationRequest(
                messages=HELLO,
                max_tokens=12,
                sampling=SamplingParams(temperature=2.0, seed=-1, ignore_eos=True),
            )
        )
        return "".join([event.text async for event in stream])

    replies = {await sample() for _ in range(4)}
    assert len(replies) > 1


async def test_embedding_text_that_is_not_unicode_is_refused(engine: EngineClient) -> None:
    spec = ModelSpec("tiny-embed", TINY_EMBED, "ir", task="embeddings")
    pid = engine.status().worker_pid
    with pytest.raises(RequestFailed) as info:
        await engine.embed(spec, ["fine", "broken \ud800"])
    assert (info.value.code, info.value.param) == ("invalid_request", "input")
    assert len((await engine.embed(spec, ["fine"])).vectors) == 1
    assert engine.status().worker_pid == pid


def test_bad_grammars_are_refused_without_touching_other_streams(
    sidelight_home: Path, dialogues: dict[str, Any]
) -> None:
    """Every bad schema is a 400-class refusal before it reaches the pipeline; a stream
    running meanwhile goes on to the end and the model is never reloaded."""
    client = _client(sidelight_home)
    messages: list[str | None] = []
    client.add_listener(lambda status: messages.append(status.message))

    async def scenario() -> Finished:
        stream = client.submit(
            GenerationRequest(
                messages=dialogue(dialogues, "count")["messages"], max_tokens=400, sampling=LONG
            )
        )
        await stream.start()
        for name, schema in BAD_SCHEMAS.items():
            for param, begin, end in (("response_format", "", ""), ("tools", "<t>", "</t>")):
                constraint = OutputConstraint(json.dumps(schema), begin, end, param)
                refusal = await _refusal(client, messages=HELLO, constraint=constraint)
                assert (refusal.code, refusal.param) == ("invalid_request", param), name
                assert "cannot be enforced" in str(refusal), name
        # A good schema still goes through (the probe refuses only what cannot compile).
        good = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 5}}}
        constraint = OutputConstraint(json.dumps(good))
        _, result, _ = await generate(client, messages=HELLO, constraint=constraint)
        assert result.finish_reason in ("stop", "length")
        async for event in stream:
            if isinstance(event, Finished):
                return event
        raise AssertionError("no Finished event")

    try:
        pid = client.status().worker_pid
        ended = asyncio.run(scenario())
        assert ended.finish_reason == "length" and ended.completion_tokens == 400
        status = client.status()
        assert status.worker_pid == pid and status.failed == 0 and status.active_requests == 0
        assert not [m for m in messages if m and "loading" in m]  # no reload
    finally:
        client.close()


class _InProcessWorker:
    """A real :class:`Worker` on a thread, without the grammar probe, over a real pipe."""

    def __init__(self) -> None:
        self.conn, child = Pipe(duplex=True)
        self.worker = Worker(child, grammar_probe=None)
        self.thread = threading.Thread(target=self.worker.run, daemon=True)
        self.thread.start()

    def send(self, command: Any) -> None:
        self.conn.send(command)

    def events(self, until: Any, timeout: float = 60) -> list[Event]:
        """Every event until ``until(event)`` is true for one."""
        seen: list[Event] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.conn.poll(0.1):
                for event in self.conn.recv():
                    seen.append(event)
                    if until(event):
                        return seen
        raise AssertionError(f"timed out; saw {seen[-5:]}")

    def close(self) -> None:
        self.send(Shutdown())
        self.thread.join(30)


def test_a_grammar_that_fails_in_a_step_is_blamed_on_its_request(
    dialogues: dict[str, Any],
) -> None:
    """Past the probe, a failing grammar ends its own request with a refusal; a stream already
    streaming ends honestly, and a request that had produced nothing moves to the reloaded
    pipeline and completes."""
    hello = dialogue(dialogues, "hello")
    worker = _InProcessWorker()
    try:
        model = spec_from_path(ROOT / "resources" / "models" / "sidelight-demo")
        worker.send(LoadModel(model, "CPU", {}, 1.0, backend="batched"))
        worker.events(lambda e: isinstance(e, ModelLoaded))
        streaming = GenerationRequest(
            1, dialogue(dialogues, "count")["messages"], max_tokens=1500, sampling=LONG
        )
        worker.send(Submit(streaming))
        worker.events(lambda e: isinstance(e, TextDelta))
        bad = OutputConstraint(json.dumps(BAD_SCHEMAS["lookahead pattern"]))
        worker.send(Submit(GenerationRequest(2, HELLO, max_tokens=5, constraint=bad)))
        waiting = GenerationRequest(3, hello["messages"], sampling=SamplingParams(temperature=0))
        worker.send(Submit(waiting))

        ends: dict[int, Event] = {}

        def ended(event: Event) -> bool:
            if isinstance(event, Finished | RequestRejected):
                ends[event.request_id] = event
            return len(ends) == 3

        seen = worker.events(ended)
        refused = ends[2]
        assert isinstance(refused, RequestRejected)
        assert (refused.code, refused.param) == ("invalid_request", "response_format")
        assert "Lookahead" in refused.message
        _assert_short(refused.message)
        assert not [e for e in seen if isinstance(e, RequestAccepted) and e.request_id == 2]
        first = ends[1]
        assert isinstance(first, Finished) and first.finish_reason == "error"
        assert first.error and "another request's JSON schema" in first.error
        carried = ends[3]
        assert isinstance(carried, Finished) and carried.finish_reason == "stop"
        text = "".join(e.text for e in seen if isinstance(e, TextDelta) and e.request_id == 3)
        assert text + carried.text == hello["reply"]
    finally:
        worker.close()


def test_a_big_embedding_batch_does_not_stall_a_chat_stream(sidelight_home: Path) -> None:
    """The worker embeds in chunks with chat steps in between: tokens keep arriving."""
    client = _client(sidelight_home)
    spec = ModelSpec("tiny-embed", TINY_EMBED, "ir", task="embeddings")
    texts = [f"def f{i}(x): return x + {i}" for i in range(20_000)]

    async def scenario() -> tuple[list[list[float]], list[float], float, float]:
        await client.embed(spec, ["warm up"])  # the model load is not what is measured
        result, arrivals, started, finished = await chat_beside(
            client, lambda: client.embed(spec, texts)
        )
        return result.vectors, arrivals, started, finished

    try:
        vectors, arrivals, started, finished = asyncio.run(scenario())
        assert len(vectors) == len(texts)
        alone = asyncio.run(client.embed(spec, [texts[1234]])).vectors[0]
        assert vectors[1234] == pytest.approx(alone, abs=1e-5)  # chunks change no result
        assert_chat_went_on(arrivals, started, finished)
        assert client.status().active_requests == 0
    finally:
        client.close()
