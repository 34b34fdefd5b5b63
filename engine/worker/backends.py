"""The two ways the worker drives OpenVINO GenAI.

``BatchedBackend`` (CPU, GPU): one ``ContinuousBatchingPipeline`` with prefix caching; every
loop iteration adds new requests, runs one ``step()`` and reads each handle, so concurrent
requests share each forward pass. ``step()`` holds the GIL, which is why this code lives in
its own process.

``SerialBackend`` (NPU, or when asked): ``LLMPipeline`` with static shapes serves one request
at a time; others wait in a queue. The streamer callback polls for commands so a cancel
still lands within one token.

Both merge deltas that come faster than the stream interval (the first goes at once): every
delta sent wakes the server and its client, and on a 2-core laptop each wake-up preempts an
inference thread. A held delta goes out with the next one, or just before ``Finished``.

Threading: both are used only from the worker's single loop thread.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.worker.messages import (
    Event,
    Finished,
    GenerationRequest,
    RequestAccepted,
    RequestRejected,
    TextDelta,
    TokenLogprob,
)
from engine.worker.prepare import PreparedRequest, RequestError, find_fim_tokens, prepare
from engine.worker.textstream import IncrementalDetokenizer

logger = logging.getLogger(__name__)

Emit = Callable[[list[Event]], None]


@dataclass
class _Active:
    """Book-keeping for one running request."""

    request_id: int
    prompt_tokens: int
    detok: IncrementalDetokenizer
    handle: Any = None
    submitted: float = field(default_factory=time.perf_counter)
    first_token: float | None = None
    last_token: float | None = None
    completion_tokens: int = 0
    want_logprobs: bool = False
    interval: float = 0.0  # seconds between sent deltas (0: send every one)
    last_sent: float | None = None
    held: TextDelta | None = None

    def on_tokens(self, count: int) -> None:
        now = time.perf_counter()
        if self.first_token is None:
            self.first_token = now
        self.last_token = now
        self.completion_tokens += count

    def delta(self, ids: list[int], logprobs: list[float]) -> TextDelta | None:
        """Decode new tokens into a delta (``None`` when nothing is ready to send)."""
        text = self.detok.push(ids)
        probs: tuple[TokenLogprob, ...] = ()
        if self.want_logprobs:
            texts = [
                (self.detok.token_text(t), float(lp)) for t, lp in zip(ids, logprobs, strict=False)
            ]
            probs = tuple(TokenLogprob(text, lp) for text, lp in texts if text)
        delta = TextDelta(self.request_id, text, len(ids), probs)
        if self.held is not None:
            delta, self.held = _merge(self.held, delta), None
        now = self.last_token or time.perf_counter()
        early = self.last_sent is not None and now - self.last_sent < self.interval
        if early or not (delta.text or delta.logprobs):  # hold it (and count its tokens)
            self.held = delta
            return None
        self.last_sent = now
        return delta

    def ending(self, reason: str, text: str = "") -> list[Event]:
        """The events that end a request normally: any held delta, then ``Finished``."""
        held, self.held = self.held, None
        finished = self.finished(reason, text=text)
        if held is None or not (held.text or held.logprobs):
            return [finished]
        return [held, finished]

    def finished(self, reason: str, text: str = "", error: str | None = None) -> Finished:
        ttft = self.first_token - self.submitted if self.first_token else None
        decode = (
            self.last_token - self.first_token
            if self.first_token is not None and self.last_token is not None
            else None
        )
        return Finished(
            request_id=self.request_id,
            finish_reason=reason,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            ttft_seconds=ttft,
            decode_seconds=decode,
            text=text,
            error=error,
        )


def _merge(first: TextDelta, second: TextDelta) -> TextDelta:
    return TextDelta(
        first.request_id,
        first.text + second.text,
        first.tokens + second.tokens,
        first.logprobs + second.logprobs,
    )


class Backend:
    """Common request intake: templating, tokenization, context checks."""

    name = "base"
    broken = False  # a failed step left the pipeline unusable; the worker rebuilds it

    def __init__(self, tokenizer: Any, base_config: Any, context_length: int | None) -> None:
        self.tokenizer = tokenizer
        self.base_config = base_config
        self.context_length = context_length
        self.chat_template: str | None = getattr(tokenizer, "chat_template", None) or None
        self.fim_tokens = find_fim_tokens(tokenizer)
        # Tokens that end a turn never become text (see IncrementalDetokenizer).
        hidden = {int(base_config.eos_token_id), *(int(t) for t in base_config.stop_token_ids)}
        for getter in ("get_bos_token_id", "get_pad_token_id", "get_eos_token_id"):
            value = getattr(tokenizer, getter, lambda: -1)()
            if isinstance(value, int) and value >= 0:
                hidden.add(value)
        self.hidden_ids = frozenset(hidden)
        self.stream_interval = 0.0  # set by the worker from LoadModel
        self.byte_table: dict[int, bytes] | None = None  # fast detokenizing, when it is exact

    def _prepare(self, request: GenerationRequest) -> tuple[PreparedRequest | None, list[Event]]:
        try:
            prepared = prepare(
                request, self.tokenizer, self.base_config, self.context_length, self.fim_tokens
            )
        except RequestError as exc:
            return None, [RequestRejected(request.request_id, exc.code, str(exc), exc.param)]
        accepted = RequestAccepted(
            request.request_id,
            len(prepared.prompt_ids),
            prepared.max_tokens,
            prepared.opens_reasoning,
        )
        return prepared, [accepted]

    def _state(self, request: GenerationRequest, prepared: PreparedRequest) -> _Active:
        return _Active(
            request.request_id,
            len(prepared.prompt_ids),
            IncrementalDetokenizer(self.tokenizer, request.stop, self.hidden_ids, self.byte_table),
            want_logprobs=request.logprobs,
            interval=self.stream_interval,
        )

    def submit(self, request: GenerationRequest) -> list[Event]:
        raise NotImplementedError

    def cancel(self, request_id: int) -> list[Event]:
        raise NotImplementedError

    def has_work(self) -> bool:
        raise NotImplementedError

    def step(self, emit: Emit, poll: Callable[[], None]) -> None:
        raise NotImplementedError

    def close(self) -> list[Event]:
        """Drop every request (model unloaded); returns their Finished events."""
        raise NotImplementedError


def _tensor(ids: list[int]) -> Any:
    import numpy as np
    import openvino as ov

    return ov.Tensor(np.array([ids], dtype=np.int64))


class BatchedBackend(Backend):
    name = "batched"

    def __init__(self, pipeline: Any, context_length: int | None) -> None:
        super().__init__(pipeline.get_tokenizer(), pipeline.get_config(), context_length)
        self._pipe = pipeline
        self._active: dict[int, _Active] = {}

    def submit(self, request: GenerationRequest) -> list[Event]:
        prepared, events = self._prepare(request)
        if prepared is None:
            return events
        state = self._state(request, prepared)
        try:
            state.handle = self._pipe.add_request(
                request.request_id, _tensor(prepared.prompt_ids), prepared.config
            )
        except Exception as exc:
            logger.exception("add_request failed")
            return [RequestRejected(request.request_id, "internal", f"engine error: {exc}")]
        self._active[request.request_id] = state
        return events

    def cancel(self, request_id: int) -> list[Event]:
        state = self._active.pop(request_id, None)
        if state is None:
            return []
        state.handle.cancel()
        return [state.finished("cancelled")]

    def has_work(self) -> bool:
        # Cancelled requests need one more step for the pipeline to free their blocks.
        return bool(self._active) or bool(self._pipe.has_non_finished_requests())

    def step(self, emit: Emit, poll: Callable[[], None]) -> None:
        import openvino_genai as ov_genai

        try:
            self._pipe.step()
        except Exception as exc:
            # The failing request stays inside the pipeline and fails every later step.
            logger.exception("pipeline step failed; the model will be reloaded")
            emit([s.finished("error", error=f"engine error: {exc}") for s in self._active.values()])
            self._active.clear()
            self.broken = True
            return
        events: list[Event] = []
        for rid, state in list(self._active.items()):
            reason = self._read(state, events)
            status = state.handle.get_status()
            if status == ov_genai.GenerationStatus.RUNNING and reason is None:
                continue
            if status == ov_genai.GenerationStatus.IGNORED:
                events.append(
                    state.finished(
                        "error", error="the request did not fit in the KV cache; raise kv_cache_gb"
                    )
                )
            else:
                if reason is None:
                    reason = "stop"
                events.extend(state.ending(reason, text=state.detok.finish()))
            if state.detok.stop.matched and status == ov_genai.GenerationStatus.RUNNING:
                state.handle.stop()
            del self._active[rid]
        if events:
            emit(events)

    def _read(self, state: _Active, events: list[Event]) -> str | None:
        """Read new tokens; return a finish reason once the request has ended."""
        reason = None
        while state.handle.can_read():
            outputs = state.handle.read()
            for output in outputs.values():
                ids = list(output.generated_ids)
                if ids:
                    state.on_tokens(len(ids))
                    logprobs = list(output.generated_log_probs) if state.want_logprobs else []
                    delta = state.delta(ids, logprobs)
                    if delta is not None:
                        events.append(delta)
                reason = _finish_reason(output.finish_reason) or reason
            if state.detok.stop.matched:
                return "stop"
        return reason

    def close(self) -> list[Event]:
        events: list[Event] = [self.cancel(rid)[0] for rid in list(self._active)]
        self._pipe = None
        return events


def _finish_reason(value: Any) -> str | None:
    import openvino_genai as ov_genai

    if value == ov_genai.GenerationFinishReason.LENGTH:
        return "length"
    if value == ov_genai.GenerationFinishReason.STOP:
        return "stop"
    return None


class SerialBackend(Backend):
    """One request at a time through ``LLMPipeline`` (NPU's static-shape pipeline)."""

    name = "serial"

    def __init__(self, pipeline: Any, context_length: int | None) -> None:
        super().__init__(pipeline.get_tokenizer(), pipeline.get_generation_config(), context_length)
        self._pipe = pipeline
        self._queue: collections.deque[tuple[_Active, PreparedRequest]] = collections.deque()
        self._cancelled: set[int] = set()
        self._running: _Active | None = None

    def submit(self, request: GenerationRequest) -> list[Event]:
        prepared, events = self._prepare(request)
        if prepared is not None:
            self._queue.append((self._state(request, prepared), prepared))
        return events

    def cancel(self, request_id: int) -> list[Event]:
        if self._running is not None and self._running.request_id == request_id:
            self._cancelled.add(request_id)  # the streamer stops it at the next token
            return []
        for item in list(self._queue):
            if item[0].request_id == request_id:
                self._queue.remove(item)
                return [item[0].finished("cancelled")]
        return []

    def has_work(self) -> bool:
        return bool(self._queue)

    def step(self, emit: Emit, poll: Callable[[], None]) -> None:
        import openvino_genai as ov_genai

        state, prepared = self._queue.popleft()
        self._running = state
        backend = self

        class _Streamer(ov_genai.StreamerBase):  # type: ignore[misc]
            def write(self, token: Any) -> Any:
                ids = [int(t) for t in token] if isinstance(token, list | tuple) else [int(token)]
                state.on_tokens(len(ids))
                # The streamer gets no log-probabilities: serial requests report none.
                delta = state.delta(ids, [])
                if delta is not None:
                    emit([delta])
                poll()  # lets a Cancel (or new Submits) arrive mid-generation
                if state.request_id in backend._cancelled:
                    return ov_genai.StreamingStatus.CANCEL
                if state.detok.stop.matched:
                    return ov_genai.StreamingStatus.STOP
                return ov_genai.StreamingStatus.RUNNING

            def end(self) -> None:
                pass

        try:
            self._pipe.generate(_tensor(prepared.prompt_ids), prepared.config, _Streamer())
        except Exception as exc:
            logger.exception("generate failed")
            emit([state.finished("error", error=f"engine error: {exc}")])
            return
        finally:
            self._running = None
        if state.request_id in self._cancelled:
            self._cancelled.discard(state.request_id)
            emit([state.finished("cancelled")])
            return
        reason = "stop"
        if not state.detok.stop.matched and state.completion_tokens >= prepared.max_tokens:
            reason = "length"
        emit(state.ending(reason, text=state.detok.finish()))

    def close(self) -> list[Event]:
        events: list[Event] = [item[0].finished("cancelled") for item in self._queue]
        self._queue.clear()
        self._pipe = None
        return events
