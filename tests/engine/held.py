"""A request kept in flight without timing anything: submit it, wait until the worker has
accepted it, then stop the worker process (SIGSTOP) until the block ends (SIGCONT). The
engine's watchdog allows far longer than a test holds it."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from engine.server.pipeline import GenerateRequest, Pipeline, Reply
from engine.supervisor.client import EngineClient
from engine.supervisor.streams import RequestStream
from engine.worker.messages import GenerationRequest, SamplingParams


@asynccontextmanager
async def held_request(client: EngineClient, max_tokens: int) -> AsyncIterator[RequestStream]:
    """Yield a greedy request on ``client`` that cannot finish before the block ends."""
    stream = client.submit(
        GenerationRequest(
            request_id=0,
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=max_tokens,
            sampling=SamplingParams(temperature=0, ignore_eos=True),
        )
    )
    await stream.start()
    pid = client.status().worker_pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        yield stream
    finally:
        os.kill(pid, signal.SIGCONT)


async def finish_reason(stream: RequestStream) -> str:
    """Read ``stream`` to its end; its finish reason."""
    reason = ""
    async for event in stream:
        reason = getattr(event, "finish_reason", reason)
    return reason


def collect_unloading_after_lookup(
    pipeline: Pipeline, unload: Callable[[str], bool]
) -> tuple[Reply, list[bool]]:
    """Run one short greedy demo-model request through ``pipeline``, calling ``unload(model)``
    once right after the pipeline looked its model up and before it submits: the moment an
    idle timer or an eviction on another thread could end the worker. Returns the reply and
    what ``unload`` returned."""
    lookup = pipeline.resolver.chat_engine
    unloaded: list[bool] = []

    async def lookup_then_unload(name: str) -> object:
        found = await lookup(name)
        if not unloaded:
            unloaded.append(await asyncio.to_thread(unload, name))
        return found

    pipeline.resolver.chat_engine = lookup_then_unload  # type: ignore[method-assign,assignment]
    request = GenerateRequest(
        model="sidelight-demo",
        dialect="openai",
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=4,
        sampling=SamplingParams(temperature=0),
    )
    return asyncio.run(pipeline.collect(request)), unloaded
