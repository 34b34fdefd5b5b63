"""A scripted stand-in for the request pipeline (``engine.server.pipeline``).

It stands in for the pipeline only in unit tests of a dialect's translator, renderer and
routes: each request gets the next scripted reply (parsed events, as the real pipeline
yields them), and every :class:`GenerateRequest` is kept for the test to inspect. The
end-to-end tests run the real pipeline on real models.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from engine.parsing import (
    ContentDelta,
    ReasoningText,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from engine.server.errors import APIError
from engine.server.pipeline import (
    Done,
    FinishReason,
    GenerateRequest,
    Logprobs,
    PipelineEvent,
    Reply,
    Started,
    Timings,
    Usage,
)


@dataclass
class Script:
    """One reply: its events (ending in Done), or a refusal before it starts, or a failure
    after its events; ``hang`` waits forever after them (a client must leave); ``delay``
    seconds pass before each event (a slow model)."""

    events: list[PipelineEvent] = field(default_factory=list)
    refusal: APIError | None = None
    failure: APIError | None = None
    hang: bool = False
    delay: float = 0.0


def reply(
    content: str = "",
    *,
    reasoning: str = "",
    calls: tuple[tuple[str, str], ...] = (),
    finish: FinishReason | None = None,
    pieces: int = 2,
    usage: tuple[int, int] = (7, 5),
) -> Script:
    """A reply streamed in a few pieces: thinking, then text, then calls (name, arguments)."""
    events: list[PipelineEvent] = [ReasoningText(p) for p in _split(reasoning, pieces)]
    events += [ContentDelta(p) for p in _split(content, pieces)]
    for index, (name, arguments) in enumerate(calls):
        call = ToolCall(f"call_{index}", name, arguments)
        events += [ToolCallStart(index, call.id, name)]
        events += [ToolCallDelta(index, p) for p in _split(arguments, pieces)]
        events += [ToolCallEnd(index, call)]
    reason: FinishReason = finish or ("tool_calls" if calls else "stop")
    events.append(Done(reason, Usage(*usage), Timings(0.01, 0.02)))
    return Script(events)


def _split(text: str, pieces: int) -> list[str]:
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]


class ScriptedGeneration:
    def __init__(self, started: Started, script: Script) -> None:
        self._started = started
        self._script = script
        self.cancelled = False

    @property
    def started(self) -> Started:
        return self._started

    def __aiter__(self) -> AsyncIterator[PipelineEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[PipelineEvent]:
        for event in self._script.events:
            if self._script.delay:
                await asyncio.sleep(self._script.delay)
            yield event
        if self._script.failure is not None:
            raise self._script.failure
        if self._script.hang:
            await asyncio.Event().wait()

    def cancel(self) -> None:
        self.cancelled = True


class ScriptedPipeline:
    """Answers each request with the next script (the last one repeats); ``scripts`` may be
    replaced between requests. Keeps every request and generation for the test."""

    def __init__(
        self, *scripts: Script, model: str = "scripted-model", prompt_tokens: int = 7
    ) -> None:
        self.scripts = list(scripts) or [reply("Hello!")]
        self.model = model
        self.prompt_tokens = prompt_tokens
        self.requests: list[GenerateRequest] = []
        self.generations: list[ScriptedGeneration] = []

    async def start(self, request: GenerateRequest) -> ScriptedGeneration:
        self.requests.append(request)
        script = self.scripts.pop(0) if len(self.scripts) > 1 else self.scripts[0]
        if script.refusal is not None:
            raise script.refusal
        generation = ScriptedGeneration(Started(self.model, self.prompt_tokens), script)
        self.generations.append(generation)
        return generation

    async def count(self, request: GenerateRequest) -> int:
        """As :meth:`engine.server.pipeline.Pipeline.count`: the prompt's tokens alone."""
        counting = dataclasses.replace(request, count_only=True, max_tokens=1)
        generation = await self.start(counting)
        async for _event in generation:
            pass
        return generation.started.prompt_tokens

    async def collect(self, request: GenerateRequest) -> Reply:
        generation = await self.start(request)
        collected = Reply(generation.started, Done("stop", Usage(0, 0), Timings(None, None)))
        async for event in generation:
            if isinstance(event, ReasoningText):
                collected.reasoning += event.text
            elif isinstance(event, ContentDelta):
                collected.content += event.text
            elif isinstance(event, ToolCallEnd):
                collected.calls.append(event.call)
            elif isinstance(event, Logprobs):
                collected.logprobs.extend(event.items)
            elif isinstance(event, Done):
                collected.done = event
        return collected
