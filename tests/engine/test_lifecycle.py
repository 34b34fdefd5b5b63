"""Model lifecycle on a real engine worker: idle unload, keep_alive, release.

Unloading ends the model's worker process (an unload inside it frees only ~8-30 MB), so these
tests measure the workers' RSS with psutil before and after. The idle unloads are timed by
the scheduler's owner loop (a client alone never unloads for being idle), so those tests
place the demo model as a runtime's default model and watch its client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest

from engine.models import spec_from_path
from engine.runtime import Runtime
from engine.settings import Settings, load_settings
from engine.supervisor.client import EngineClient
from engine.supervisor.states import IDLE, READY
from engine.worker.messages import Finished, GenerationRequest, SamplingParams
from tests.engine.held import collect_unloading_after_lookup

GREEDY = SamplingParams(temperature=0)


def _settings(home: Path, idle_seconds: float) -> Settings:
    env = {"SIDELIGHT_HOME": str(home), "SIDELIGHT_IDLE_UNLOAD_SECONDS": str(idle_seconds)}
    settings = load_settings(env)
    settings.paths.ensure()
    return settings


def load_tiny(client: EngineClient, tiny_model: Path) -> int:
    client.load(spec_from_path(tiny_model))
    status = client.wait_for({READY}, 120)
    assert status.state == READY, status.message
    assert status.worker_pid is not None
    return status.worker_pid


async def reply(client: EngineClient, max_tokens: int = 8, *, to_the_end: bool = False) -> Finished:
    sampling = SamplingParams(temperature=0, ignore_eos=to_the_end)
    request = GenerationRequest(
        messages=[{"role": "user", "content": "Count to ten."}],
        max_tokens=max_tokens,
        sampling=sampling,
    )
    async for event in client.submit(request):
        if isinstance(event, Finished):
            return event
    raise AssertionError("no Finished event")


def rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def wait_unloaded(client: EngineClient, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.status()
        if status.state == IDLE and status.model is None and status.worker_pid is not None:
            return
        time.sleep(0.05)
    raise AssertionError(f"the model was not unloaded: {client.status()}")


def assert_exits(pid: int) -> None:
    """The retired worker process ends (within 10 s), so its memory is the OS's again."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)
    raise AssertionError(f"worker {pid} is still running")


@contextmanager
def placed_client(home: Path, idle_seconds: float, tiny_model: Path) -> Iterator[EngineClient]:
    """The demo model's client, placed as a runtime's default model (its spare worker stays
    after an idle unload, as a lone client's did); the runtime closes after."""
    runtime = Runtime(_settings(home, idle_seconds))
    runtime.start()
    try:
        demo = spec_from_path(tiny_model)
        runtime.default.load(demo)
        assert runtime.default.wait_for({READY}, 120).state == READY
        client = runtime.scheduler.client(demo.id)
        assert client is not None
        yield client
    finally:
        runtime.close()


@pytest.fixture
def idle_client(sidelight_home: Path, tiny_model: Path) -> Iterator[EngineClient]:
    with placed_client(sidelight_home, 1.0, tiny_model) as client:
        yield client


def test_an_idle_model_is_unloaded_and_its_memory_freed(
    idle_client: EngineClient, tiny_model: Path
) -> None:
    pid = load_tiny(idle_client, tiny_model)
    assert asyncio.run(reply(idle_client)).finish_reason in ("stop", "length")
    loaded = rss(pid)
    wait_unloaded(idle_client, 30)
    status = idle_client.status()
    assert status.worker_pid != pid
    assert status.message is not None and "idle" in status.message
    assert_exits(pid)
    assert status.worker_pid is not None
    fresh = rss(status.worker_pid)
    assert fresh < loaded / 2, (fresh, loaded)  # OpenVINO and the model's memory are gone
    # A later request loads it again.
    load_tiny(idle_client, tiny_model)
    assert asyncio.run(reply(idle_client)).finish_reason in ("stop", "length")


def test_keep_alive_zero_unloads_after_the_request(sidelight_home: Path, tiny_model: Path) -> None:
    # -1, the default: never unload for being idle.
    with placed_client(sidelight_home, -1, tiny_model) as client:
        pid = load_tiny(client, tiny_model)
        assert client.expires_at() is None  # forever
        asyncio.run(reply(client))
        time.sleep(0.5)
        assert client.status().model is not None  # still loaded: keep_alive is forever
        client.set_keep_alive(60)
        expires = client.expires_at()
        assert expires is not None
        assert abs((expires - datetime.now(UTC)).total_seconds() - 60) < 2
        client.set_keep_alive(0)
        wait_unloaded(client, 10)
        assert client.status().worker_pid != pid
        assert_exits(pid)
        assert client.expires_at() is None


def test_release_never_cancels_a_running_request(sidelight_home: Path, tiny_model: Path) -> None:
    with placed_client(sidelight_home, -1, tiny_model) as client:
        pid = load_tiny(client, tiny_model)

        async def scenario() -> tuple[Finished, list[bool]]:
            task = asyncio.create_task(reply(client, 200, to_the_end=True))
            while not client.status().active_requests:
                await asyncio.sleep(0.01)
            refused = [client.release("test"), client.release("test")]
            client.set_keep_alive(0)  # wanted gone, but only after the request
            return await task, refused

        finished, refused = asyncio.run(scenario())
        assert refused == [False, False]
        assert finished.finish_reason == "length" and finished.completion_tokens == 200
        wait_unloaded(client, 10)  # keep_alive 0: gone once the request ended
        assert client.status().worker_pid != pid


def test_a_model_unloaded_between_lookup_and_submit_is_loaded_again(
    sidelight_home: Path, tiny_model: Path
) -> None:
    """The idle timer may end the worker between the pipeline's model lookup and its submit
    (another thread); the request then loads the model again instead of failing. The timer
    firing at that moment is forced by calling release() right after the lookup. The demo
    model is the runtime's default model; its client is the one the idle timer runs on."""
    from engine.server.pipeline import Pipeline

    runtime = Runtime(_settings(sidelight_home, -1))
    runtime.start()
    try:
        demo = spec_from_path(tiny_model)
        runtime.default.load(demo)
        status = runtime.default.wait_for({READY}, 120)
        assert status.state == READY, status.message
        client = runtime.scheduler.running(demo.id)
        assert client is not None
        pid = status.worker_pid
        assert pid is not None
        reply, released = collect_unloading_after_lookup(
            Pipeline(runtime.engine), lambda name: client.release("idle")
        )
        assert released == [True]
        assert reply.done.usage.completion_tokens > 0
        assert client.status().worker_pid != pid
    finally:
        runtime.close()
