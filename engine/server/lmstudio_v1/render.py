"""The pipeline's events as LM Studio's chat stream events, and as its whole answer.

A stream is ``chat.start``; ``model_load.start`` and ``model_load.end`` when this request
loaded the model; ``prompt_processing.start`` and ``.end`` (the end when the first reply
text arrives); then ``reasoning.start``/``.delta``/``.end`` and ``message.start``/
``.delta``/``.end`` as the reply moves between thinking and answer; then ``chat.end``, whose
``result`` is the non-streamed answer. A failure after the stream began is an ``error``
event, and ``chat.end`` still follows with what was generated, as LM Studio documents.

The whole answer is the same renderer's result with the events dropped, so both agree.
Whitespace alone never opens a message (a model's newlines after its thinking), and
``reasoning_output_tokens`` counts the tokens generated until the last piece of reasoning.

Runs on the server's event loop, one renderer per request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol

from engine.parsing import ContentDelta, ReasoningText
from engine.server.errors import APIError
from engine.server.lmstudio_v1 import protocol
from engine.server.pipeline import Done, PipelineEvent, Started

Event = dict[str, Any]


class GenerationLike(Protocol):
    """What this dialect reads from the pipeline's ``Generation``."""

    @property
    def started(self) -> Started: ...

    @property
    def tokens(self) -> int:
        """Tokens generated so far."""
        ...

    def __aiter__(self) -> AsyncIterator[PipelineEvent]: ...

    def cancel(self) -> None: ...


class ChatRenderer:
    """Builds the events and the ``output`` items of one chat as its events arrive."""

    def __init__(self, started: Started, load_seconds: float | None) -> None:
        self.started = started
        self.load_seconds = load_seconds
        self.output: list[dict[str, Any]] = []
        self.done: Done | None = None
        self.reasoning_tokens = 0
        self._open: Literal["reasoning", "message"] | None = None
        self._prompt_done = False
        self._held = ""  # whitespace not yet shown (see the module docstring)

    def start(self) -> list[Event]:
        model = self.started.model
        events: list[Event] = [{"type": "chat.start", "model_instance_id": model}]
        if self.load_seconds is not None:
            events += [
                {"type": "model_load.start", "model_instance_id": model},
                {
                    "type": "model_load.end",
                    "model_instance_id": model,
                    "load_time_seconds": round(self.load_seconds, 3),
                },
            ]
        events.append({"type": "prompt_processing.start"})
        return events

    def feed(self, item: PipelineEvent, tokens: int) -> list[Event]:
        """The events for one pipeline event; ``tokens``: generated so far."""
        if isinstance(item, Done):
            self.done = item
            return [*self._prompt_end(), *self._close()]
        if isinstance(item, ReasoningText):
            self.reasoning_tokens = tokens
            return self._add("reasoning", item.text)
        if isinstance(item, ContentDelta):
            if self._open != "message" and not item.text.strip():
                self._held += item.text
                return []
            text, self._held = self._held + item.text, ""
            return self._add("message", text)
        return []  # Started, Logprobs, tool calls: this API has no custom tools

    def fail(self, exc: APIError) -> list[Event]:
        error = protocol.error_object(exc.status, exc.message, param=exc.param, code=exc.code)
        return [*self._prompt_end(), *self._close(), {"type": "error", "error": error}]

    def result(self, tokens: int, response_id: str | None) -> dict[str, Any]:
        """The whole answer: complete after ``Done``, what was generated after a failure."""
        done = self.done
        if done is None:
            stats = protocol.stats(
                self.started.prompt_tokens, tokens, self.reasoning_tokens, None, None, None
            )
        else:
            stats = protocol.stats(
                done.usage.prompt_tokens,
                done.usage.completion_tokens,
                self.reasoning_tokens,
                done.tokens_per_second,
                done.timings.ttft_seconds,
                self.load_seconds,
            )
        return protocol.chat_result(self.started.model, self.output, stats, response_id)

    def _add(self, kind: Literal["reasoning", "message"], text: str) -> list[Event]:
        events = self._prompt_end()
        if self._open != kind:
            events += self._close()
            self._open = kind
            self.output.append({"type": kind, "content": ""})
            events.append({"type": f"{kind}.start"})
        if text:
            self.output[-1]["content"] += text
            events.append({"type": f"{kind}.delta", "content": text})
        return events

    def _close(self) -> list[Event]:
        if self._open is None:
            return []
        kind, self._open = self._open, None
        return [{"type": f"{kind}.end"}]

    def _prompt_end(self) -> list[Event]:
        if self._prompt_done:
            return []
        self._prompt_done = True
        return [{"type": "prompt_processing.end"}]


def chat_end(result: dict[str, Any]) -> Event:
    return {"type": "chat.end", "result": result}
