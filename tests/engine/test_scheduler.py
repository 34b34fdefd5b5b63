"""The scheduler in process, on real workers and the tiny models (no server).

Each model gets a worker of its own; the default view keeps the one-model status; a model
evicted (or unloaded) between the pipeline's lookup and its submit is loaded again rather
than failing; an explicit unload refuses while a request runs (held in flight by stopping
its worker with SIGSTOP, as a debugger would, until SIGCONT).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.client import READY
from engine.models import spec_from_path
from engine.settings import load_settings
from engine.supervisor.scheduler import Scheduler
from engine.worker.messages import SamplingParams
from tests.conftest import TINY_CODER
from tests.engine.held import finish_reason, held_request

GREEDY = SamplingParams(temperature=0)


@pytest.fixture
def scheduler(sidelight_home: Path) -> Iterator[Scheduler]:
    settings = load_settings({"SIDELIGHT_HOME": str(sidelight_home)})
    settings.paths.ensure()
    scheduler = Scheduler(settings)
    scheduler.start()
    yield scheduler
    scheduler.close()


def test_each_model_has_its_own_worker_and_the_default_view_stays(
    scheduler: Scheduler, tiny_model: Path
) -> None:
    demo = spec_from_path(tiny_model)
    scheduler.load(demo)
    assert scheduler.wait_for({READY}, 120).state == READY
    coder = spec_from_path(TINY_CODER, model_id="tiny-coder")
    client = scheduler.acquire(coder, None, 120)
    assert client.status().state == READY
    models = {m.id: m for m in scheduler.loaded()}
    assert set(models) == {demo.id, "tiny-coder"}
    assert models[demo.id].default and not models["tiny-coder"].default
    assert models[demo.id].worker_pid != models["tiny-coder"].worker_pid
    assert all(m.memory_mb and not m.memory_estimated for m in models.values())
    status = scheduler.status()  # the default model's, as /health's top level shows it
    assert status.model is not None and status.model.id == demo.id
    assert scheduler.running(" TINY-CODER ") is client  # ids: any case, spaces trimmed
    assert scheduler.unload("tiny-coder")
    assert {m.id for m in scheduler.loaded()} == {demo.id}
    assert scheduler.running("tiny-coder") is None


def test_a_model_evicted_between_lookup_and_submit_is_loaded_again(
    scheduler: Scheduler, tiny_model: Path
) -> None:
    from engine.server.pipeline import GenerateRequest, Pipeline

    scheduler.load(spec_from_path(tiny_model))
    assert scheduler.wait_for({READY}, 120).state == READY
    old_pid = scheduler.status().worker_pid
    pipeline = Pipeline(scheduler)
    lookup = pipeline.resolver.chat_engine
    unloaded: list[bool] = []

    async def lookup_then_evict(name: str) -> object:
        found = await lookup(name)
        if not unloaded:
            unloaded.append(await asyncio.to_thread(scheduler.unload, name, "evicted"))
        return found

    pipeline.resolver.chat_engine = lookup_then_evict  # type: ignore[method-assign,assignment]
    request = GenerateRequest(
        model="sidelight-demo",
        dialect="openai",
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=4,
        sampling=GREEDY,
    )
    reply = asyncio.run(pipeline.collect(request))
    assert unloaded == [True]
    assert reply.done.finish_reason in ("stop", "length")
    assert reply.done.usage.completion_tokens > 0
    assert scheduler.status().worker_pid not in (None, old_pid)


def test_unload_refuses_while_a_request_runs(scheduler: Scheduler, tiny_model: Path) -> None:
    scheduler.load(spec_from_path(tiny_model))
    assert scheduler.wait_for({READY}, 120).state == READY

    async def run() -> tuple[bool, str]:
        client = scheduler.running("sidelight-demo")
        assert client is not None
        async with held_request(client, 300) as stream:
            refused = await asyncio.to_thread(scheduler.unload, "sidelight-demo")
        reason = await finish_reason(stream)
        return refused, reason

    refused, reason = asyncio.run(run())
    assert refused is False and reason == "length"
    assert {m.id for m in scheduler.loaded()} == {"sidelight-demo"}
