"""The pipeline's remote path (engine/server/pipeline/run.py RemoteGeneration) on a scripted
remote: events pass through as the remote parsed them, the monitor records each request
once, a count reads the remote's usage, cancel and close end it, failures stay typed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from engine.models import ModelSpec
from engine.parsing import ContentDelta, ReasoningText, ReplyEvent
from engine.server.errors import APIError
from engine.server.pipeline import Done, GenerateRequest, Logprobs, Pipeline, Timings, Usage
from engine.server.pipeline.request import Dialect
from tests.server.fake_engine import FakeEngine

SPEC = ModelSpec("big@box", Path("@box"), "remote")
DONE = Done("stop", Usage(11, 3), Timings(0.1, 0.2))


@dataclass
class ScriptedStream:
    events: list[ReplyEvent | Logprobs | Done]
    fail_after: APIError | None = None
    cancelled: bool = False
    closed: bool = False

    async def _run(self) -> AsyncIterator[ReplyEvent | Logprobs | Done]:
        for event in self.events:
            if self.cancelled:
                yield Done("cancelled", Usage(0, 1), Timings(None, None))
                return
            yield event
        if self.fail_after is not None:
            raise self.fail_after

    def __aiter__(self) -> AsyncIterator[ReplyEvent | Logprobs | Done]:
        return self._run()

    def cancel(self) -> None:
        self.cancelled = True

    async def aclose(self) -> None:
        self.closed = True


@dataclass
class ScriptedRemote:
    streams: list[ScriptedStream] = field(default_factory=list)
    sent: list[GenerateRequest] = field(default_factory=list)
    refusal: APIError | None = None

    @property
    def spec(self) -> ModelSpec:
        return SPEC

    async def start(self, request: GenerateRequest) -> ScriptedStream:
        self.sent.append(request)
        if self.refusal is not None:
            raise self.refusal
        return self.streams.pop(0)

    async def embed(self, texts: list[str]) -> Any:
        raise NotImplementedError

    async def rerank(self, query: str, documents: list[str]) -> Any:
        raise NotImplementedError


@dataclass
class Catalog:
    remote: ScriptedRemote

    def target(self, name: str) -> ScriptedRemote | None:
        return self.remote if name.lower().endswith("@box") else None

    def infos(self) -> list[Any]:
        return []

    def find(self, name: str) -> Any:
        return None

    def statuses(self) -> dict[str, Any]:
        return {"remotes": []}


def request(
    model: str = "big@BOX", dialect: Dialect = "anthropic", **extra: Any
) -> GenerateRequest:
    return GenerateRequest(
        model=model, dialect=dialect, messages=[{"role": "user", "content": "hi"}], **extra
    )


def pipeline(remote: ScriptedRemote) -> tuple[Pipeline, FakeEngine]:
    engine = FakeEngine()
    return Pipeline(engine, None, remotes=Catalog(remote)), engine


async def test_events_pass_through_and_nothing_reaches_the_local_engine() -> None:
    stream = ScriptedStream([ReasoningText("hm"), ContentDelta("Hello"), DONE])
    remote = ScriptedRemote([stream])
    pipe, engine = pipeline(remote)
    reply = await pipe.collect(request())
    assert (reply.reasoning, reply.content, reply.done) == ("hm", "Hello", DONE)
    assert reply.started.model == "big@box"
    assert engine.submitted == [] and engine.loads == []
    assert stream.closed
    records = pipe.monitor.log.entries()
    assert [(r.model, r.outcome, r.prompt_tokens) for r in records] == [("big@box", "ok", 11)]


async def test_a_count_reads_the_remotes_usage_and_sends_no_text_back() -> None:
    stream = ScriptedStream([ContentDelta("x"), DONE])
    remote = ScriptedRemote([stream])
    pipe, _ = pipeline(remote)
    assert await pipe.count(request()) == 11
    assert remote.sent[0].count_only


async def test_a_refusal_and_a_failure_mid_stream_stay_typed_and_recorded() -> None:
    remote = ScriptedRemote(refusal=APIError(404, "remote 'box': no such model"))
    pipe, _ = pipeline(remote)
    with pytest.raises(APIError) as refused:
        await pipe.start(request())
    assert refused.value.status == 404
    broken = ScriptedStream([ContentDelta("par")], fail_after=APIError(502, "cut"))
    remote.refusal, remote.streams = None, [broken]
    generation = await pipe.start(request())
    seen = []
    with pytest.raises(APIError) as cut:
        async for event in generation:
            seen.append(event)
    assert cut.value.status == 502 and seen == [ContentDelta("par")]
    assert [r.status for r in pipe.monitor.log.entries()] == [404, 502]


async def test_cancel_ends_with_cancelled_and_close_lets_go_of_the_connection() -> None:
    stream = ScriptedStream([ContentDelta("a"), ContentDelta("b"), DONE])
    idle = ScriptedStream([DONE])
    pipe, _ = pipeline(ScriptedRemote([stream, idle]))
    generation = await pipe.start(request())
    events = []
    async for event in generation:
        events.append(event)
        generation.cancel()
    assert events[0] == ContentDelta("a")
    assert isinstance(events[-1], Done) and events[-1].finish_reason == "cancelled"
    never_read = await pipe.start(request())
    never_read.close()
    await _settle()
    assert idle.closed


async def _settle() -> None:
    import asyncio

    for _ in range(3):
        await asyncio.sleep(0)


async def test_local_models_never_take_the_remote_path() -> None:
    remote = ScriptedRemote()
    pipe, engine = pipeline(remote)
    await pipe.collect(request(model="fake-model", dialect="openai"))
    assert remote.sent == [] and engine.submitted


async def test_images_for_a_remote_model_are_refused_never_dropped() -> None:
    from engine.server.images import ImageRef

    remote = ScriptedRemote([ScriptedStream([DONE])])
    pipe, _ = pipeline(remote)
    image = ImageRef("iVBORw0KGgo=", "messages.0.content.1.image_url")
    with pytest.raises(APIError) as refused:
        await pipe.start(request(images=(image,)))
    assert (refused.value.status, refused.value.param) == (400, image.field)
    assert "remote" in refused.value.message and remote.sent == []


async def test_audio_for_a_remote_model_is_refused_naming_the_model() -> None:
    pipe, _ = pipeline(ScriptedRemote())
    with pytest.raises(APIError) as refused:
        await pipe.resolver.transcription_model("whisper@box")
    assert (refused.value.status, refused.value.param) == (400, "model")
    assert "remote" in refused.value.message
