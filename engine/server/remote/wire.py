"""The OpenAI wire format a remote speaks, both ways: a :class:`GenerateRequest` as a
chat-completions (or completions) body, and its SSE chunks as the pipeline's reply events.

Pure functions and one small state machine (:class:`ChunkReader`), no I/O: the backend
(``backend.py``) moves the bytes. What the caller's dialect asked for passes through as
OpenAI says it: sampling, ``stop``, ``max_tokens``, tools and ``tool_choice``,
``parallel_tool_calls``, ``response_format`` (a JSON schema), thinking as
``chat_template_kwargs.enable_thinking`` (what vLLM, OVMS and Sidelight read), logprobs.
The stream always asks for usage (``stream_options.include_usage``).

Not thread-safe: one reader per request, on its loop.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from engine.parsing import (
    ContentDelta,
    ReasoningText,
    ReplyEvent,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from engine.parsing.tool_parsers.events import new_call_id
from engine.server.pipeline.events import Done, FinishReason, Logprobs, Timings, Usage
from engine.server.pipeline.request import GenerateRequest

_MESSAGE_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id")
_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "stop",
    "eos": "stop",
}
MAX_ERROR_TEXT = 500  # characters of a remote's error message passed on
# Error types whose meaning has an OpenAI code (llama-server's ``code`` is the HTTP status):
# Codex and the SDKs read ``context_length_exceeded``.
_ERROR_TYPE_CODES = {"exceed_context_size_error": "context_length_exceeded"}
MAX_CALLS = 128  # tool calls in one reply; more is a broken (or hostile) remote


def uses_completions(request: GenerateRequest) -> bool:
    """A raw prompt (completions, fill-in-the-middle) goes to ``/completions``."""
    return request.messages is None


def request_body(request: GenerateRequest, model: str) -> dict[str, Any]:
    """The body to POST to the remote for ``request`` (``model``: the remote's own id)."""
    body: dict[str, Any] = {"model": model, "stream": True}
    body["stream_options"] = {"include_usage": True}
    if uses_completions(request):
        body["prompt"] = request.prompt or ""
        if request.suffix is not None:
            body["suffix"] = request.suffix
    else:
        body["messages"] = [_message(m) for m in request.messages or []]
        _chat_fields(request, body)
    max_tokens = 1 if request.count_only else request.max_tokens
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if request.stop:
        body["stop"] = list(request.stop)
    sampling = request.sampling
    for name in (
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
    ):
        value = getattr(sampling, name)
        if value is not None:
            body[name] = value
    if sampling.ignore_eos:
        body["ignore_eos"] = True
    if request.logprobs and not request.count_only:
        body["logprobs"] = True if not uses_completions(request) else 1
    return body


def _chat_fields(request: GenerateRequest, body: dict[str, Any]) -> None:
    if request.tools:
        body["tools"] = request.tools
        choice = request.tool_choice
        if choice.name is not None:
            body["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
        else:
            body["tool_choice"] = choice.mode
        if not request.parallel_tool_calls:
            body["parallel_tool_calls"] = False
    if request.response_schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "response", "schema": request.response_schema},
        }
    kwargs = dict(request.chat_template_kwargs)
    if request.thinking is not None:
        kwargs.setdefault("enable_thinking", request.thinking)
    if kwargs:
        body["chat_template_kwargs"] = kwargs


def _message(message: dict[str, Any]) -> dict[str, Any]:
    """A message as OpenAI sends it: tool-call arguments as JSON text (Anthropic's
    ``tool_use.input`` arrives as an object), no Sidelight-only fields."""
    out = {k: message[k] for k in _MESSAGE_FIELDS if k in message}
    calls = out.get("tool_calls")
    if calls:
        fixed = []
        for call in calls:
            function = dict(call.get("function") or {})
            arguments = function.get("arguments")
            if not isinstance(arguments, str):
                function["arguments"] = json.dumps(arguments if arguments is not None else {})
            fixed.append({**call, "type": "function", "function": function})
        out["tool_calls"] = fixed
    return out


def error_text(raw: bytes) -> tuple[str, str | None, str | None]:
    """A remote's error body as (message, code, param): OpenAI's ``{"error": {...}}``
    (llama-server's too: its numeric ``code`` is dropped, a known ``type`` gives the code),
    LM Studio's ``{"error": "..."}``, FastAPI's ``{"detail": ...}`` or plain text."""
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return _short(text) or "no message", None, None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        code, param = error.get("code"), error.get("param")
        if not isinstance(code, str):
            code = _ERROR_TYPE_CODES.get(str(error.get("type")))
        return (
            _short(str(error.get("message") or "no message")),
            code,
            str(param) if isinstance(param, str) else None,
        )
    if isinstance(error, str):
        return _short(error), None, None
    if isinstance(data, dict) and "detail" in data:
        return _short(str(data["detail"])), None, None
    return _short(text), None, None


def _short(text: str) -> str:
    return text if len(text) <= MAX_ERROR_TEXT else text[:MAX_ERROR_TEXT] + "…"


@dataclass
class _Call:
    index: int
    id: str
    name: str
    arguments: list[str] = field(default_factory=list)


class ChunkReader:
    """A remote's stream chunks (decoded ``data:`` JSON) as reply events.

    ``content`` and ``reasoning_content`` / ``reasoning`` become :class:`ContentDelta` and
    :class:`ReasoningText`; ``tool_calls`` pieces become a call's start, its argument
    deltas and (when the reply ends) its end; ``finish_reason`` and ``usage`` make the
    :class:`Done`. Timings are measured here: the first and the last piece of text.
    """

    def __init__(self, *, completions: bool, logprobs: bool) -> None:
        self._completions = completions
        self._logprobs = logprobs
        self._calls: dict[int, _Call] = {}
        self._started = time.perf_counter()
        self._first: float | None = None
        self._last: float | None = None
        self.pieces = 0  # chunks that carried text or call pieces
        self.finish_reason: str | None = None
        self.usage: Usage | None = None

    @property
    def called(self) -> bool:
        return bool(self._calls)

    def feed(self, chunk: dict[str, Any]) -> list[ReplyEvent | Logprobs]:
        """The events of one chunk (a chunk without choices may carry the usage).

        Raises:
            ValueError: the chunk is not an OpenAI stream chunk (its shape is named).
        """
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            details = usage.get("prompt_tokens_details")  # the remote's own prefix-cache count
            cached = details.get("cached_tokens") if isinstance(details, dict) else None
            self.usage = Usage(
                _count(usage.get("prompt_tokens")),
                _count(usage.get("completion_tokens")),
                min(_count(cached), _count(usage.get("prompt_tokens"))),
            )
        choices = chunk.get("choices")
        if choices is None:
            return []
        if not isinstance(choices, list):
            raise ValueError("'choices' is not a list")
        events: list[ReplyEvent | Logprobs] = []
        for choice in choices[:1]:  # one choice is asked for (n is never sent)
            if not isinstance(choice, dict):
                raise ValueError("a choice is not an object")
            events.extend(self._choice(choice))
            reason = choice.get("finish_reason")
            if isinstance(reason, str):
                self.finish_reason = reason
        return events

    def _choice(self, choice: dict[str, Any]) -> list[ReplyEvent | Logprobs]:
        events: list[ReplyEvent | Logprobs] = []
        if self._logprobs:
            events.append(Logprobs(_logprobs(choice.get("logprobs"))))
        if self._completions:
            text = choice.get("text")
            if isinstance(text, str) and text:
                events.append(ContentDelta(text))
        else:
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise ValueError("'delta' is not an object")
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                events.append(ReasoningText(reasoning))
            content = delta.get("content")
            if isinstance(content, str) and content:
                events.append(ContentDelta(content))
            calls = delta.get("tool_calls")
            if isinstance(calls, list):
                for piece in calls:
                    events.extend(self._call_piece(piece))
        if any(not isinstance(e, Logprobs) for e in events):
            self._text_seen()
        return events

    def _call_piece(self, piece: Any) -> list[ReplyEvent]:
        if not isinstance(piece, dict):
            raise ValueError("a tool call piece is not an object")
        index = piece.get("index", len(self._calls))
        if not isinstance(index, int) or isinstance(index, bool):
            raise ValueError("a tool call's 'index' is not an integer")
        function = piece.get("function") or {}
        events: list[ReplyEvent] = []
        call = self._calls.get(index)
        if call is None and (len(self._calls) >= MAX_CALLS or not 0 <= index < MAX_CALLS):
            raise ValueError(f"tool call index {index}: at most {MAX_CALLS} calls in a reply")
        if call is None:
            name = function.get("name")
            call_id = piece.get("id")
            call = _Call(
                index,
                call_id if isinstance(call_id, str) and call_id else new_call_id(),
                name if isinstance(name, str) else "",
            )
            self._calls[index] = call
            events.append(ToolCallStart(index, call.id, call.name))
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # a whole call in one piece, as an object
            arguments = json.dumps(arguments)
        if isinstance(arguments, str) and arguments:
            call.arguments.append(arguments)
            events.append(ToolCallDelta(index, arguments))
        return events

    def _text_seen(self) -> None:
        now = time.perf_counter()
        if self._first is None:
            self._first = now
        self._last = now
        self.pieces += 1

    def finish(self, *, cancelled: bool = False) -> tuple[list[ReplyEvent], Done]:
        """Every open call's end, and the :class:`Done` (without a ``usage`` chunk the
        completion tokens are the pieces of text received: an estimate, said nowhere
        else, so the remote's figure is asked for with every request)."""
        ends: list[ReplyEvent] = [
            ToolCallEnd(c.index, ToolCall(c.id, c.name, "".join(c.arguments) or "{}"))
            for c in sorted(self._calls.values(), key=lambda c: c.index)
        ]
        reason: FinishReason
        if cancelled:
            reason = "cancelled"
        else:
            reason = _FINISH.get(self.finish_reason or "stop", "stop")
            if reason == "stop" and self._calls:
                reason = "tool_calls"
        usage = self.usage or Usage(0, self.pieces)
        ttft = self._first - self._started if self._first is not None else None
        decode = (
            self._last - self._first if self._first is not None and self._last is not None else None
        )
        return ends, Done(reason, usage, Timings(ttft, decode))


def _logprobs(raw: Any) -> tuple[tuple[str, float], ...]:
    """Chat's ``logprobs.content`` or completions' ``tokens``/``token_logprobs``."""
    if not isinstance(raw, dict):
        return ()
    content = raw.get("content")
    if isinstance(content, list):
        return tuple(
            (str(t.get("token", "")), float(t.get("logprob", 0.0)))
            for t in content
            if isinstance(t, dict) and isinstance(t.get("logprob"), int | float)
        )
    tokens, values = raw.get("tokens"), raw.get("token_logprobs")
    if isinstance(tokens, list) and isinstance(values, list):
        return tuple(
            (str(t), float(v))
            for t, v in zip(tokens, values, strict=False)
            if isinstance(v, int | float)
        )
    return ()


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
