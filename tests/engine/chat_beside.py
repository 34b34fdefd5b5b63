"""A chat stream beside a big batch (embeddings, rerank) on one real engine worker.

The worker runs such a batch in chunks with chat steps in between; these helpers run chat
replies back to back while the batch runs and judge, proportionally (not by the clock),
whether tokens kept arriving through it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from engine.supervisor.client import EngineClient
from engine.worker.messages import GenerationRequest, SamplingParams, TextDelta

T = TypeVar("T")

HELLO = [{"role": "user", "content": "Hello"}]
# A long reply with text all the way: greedy decoding past the reply makes hidden tokens,
# and so does plain sampling in runs of up to 300 tokens (a stream that looks stalled for
# a few tenths of a second); a frequency penalty keeps every text-less run under 15 tokens.
SHOWS_TEXT = SamplingParams(temperature=1.0, seed=7, ignore_eos=True, frequency_penalty=0.5)


async def chat_beside(
    client: EngineClient, batch: Callable[[], Awaitable[T]]
) -> tuple[T, list[float], float, float]:
    """Run ``batch()`` while chat replies stream one after another on ``client``.

    Returns the batch's result, when each chat token arrived, and when the batch started
    and finished (monotonic seconds). The tiny model writes a whole reply in well under a
    second, so replies follow one another for as long as the batch runs.
    """
    arrivals: list[float] = []
    finished = float("inf")  # until the batch is done

    async def chat() -> None:
        while time.monotonic() < finished:
            stream = client.submit(
                GenerationRequest(messages=HELLO, max_tokens=1900, sampling=SHOWS_TEXT)
            )
            async for event in stream:
                if isinstance(event, TextDelta):
                    arrivals.append(time.monotonic())
                if time.monotonic() > finished:
                    stream.cancel()

    chatting = asyncio.create_task(chat())
    await asyncio.sleep(0.1)
    started = time.monotonic()
    result = await batch()
    finished = time.monotonic()
    await chatting
    return result, arrivals, started, finished


def assert_chat_went_on(arrivals: list[float], started: float, finished: float) -> None:
    """Chat tokens arrived through most of the batch's run, not only at its edges."""
    assert finished - started > 0.5  # long enough to starve chat if run in one go
    counts = tokens_in_every_tenth(arrivals, started, finished)
    # Run in one go, the batch would leave at most the two edge tenths with tokens. A
    # machine busy with other work may pause chat (and the batch) for a while, so half the
    # tenths is the bar, not all of them.
    assert sum(1 for count in counts if count) >= 5, counts


def tokens_in_every_tenth(arrivals: list[float], started: float, finished: float) -> list[int]:
    """How many chat tokens arrived in each tenth of the batch's run.

    Proportional, not timed: on a slow or busy machine the batch and the chat slow down
    together, but a batch run in one go leaves every tenth but the edges empty.
    """
    tenth = (finished - started) / 10
    counts = [0] * 10
    for t in arrivals:
        if started <= t < finished:
            counts[min(int((t - started) / tenth), 9)] += 1
    return counts
