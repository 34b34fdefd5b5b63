"""``POST /api/chat`` and ``POST /api/generate``: NDJSON streams and whole answers.

Both stream by default, as Ollama does: one JSON object per line, then a last line with
``done: true``, the ``done_reason`` and Ollama's timing statistics (nanoseconds). An empty
``messages`` list or ``prompt`` only loads the model (``done_reason: "load"``), which
clients use to warm a model up. A failure after the stream started is one
``{"error": ...}`` line, which Ollama's clients raise as an error.

Runs on the server's event loop; inference is awaited through the engine client, and a
client that disconnects cancels its generation (:mod:`engine.server.ollama.streaming`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.server.errors import APIError
from engine.server.images import ImageList, image_from_base64
from engine.server.keep_alive import parse_keep_alive
from engine.server.model_info import ModelInfo
from engine.server.ollama import protocol
from engine.server.ollama.output import (
    Piece,
    Think,
    check_request,
    format_schema,
    function_tools,
    piece,
    thinking,
    whole,
)
from engine.server.ollama.serving import (
    OllamaServing,
    Resolved,
    log_ignored,
    max_tokens,
    num_ctx,
    sampling,
    stop,
)
from engine.server.ollama.streaming import NDJSONResponse, ndjson
from engine.server.pipeline import Done, GenerateRequest, Generation
from engine.server.request_body import parse_body
from engine.server.streaming import unless_disconnected

LineMaker = Callable[[Piece], dict[str, Any]]


class GenerationServing:
    """Chat and raw/templated generation: Ollama's requests into the pipeline, its events
    back out as Ollama's lines."""

    def __init__(self, serving: OllamaServing) -> None:
        self._serving = serving

    async def chat(self, request: Request) -> Response:
        started = time.perf_counter()
        body = await parse_body(request, protocol.ChatRequest)
        log_ignored(request.url.path, body.options)
        info = await self._serving.find(body.model, "chat")
        check_request(info, body.model, tools=bool(body.tools), think=body.think)
        tools = function_tools(body.tools)
        empty = {"message": {"role": "assistant", "content": ""}}
        if not body.messages and self._serving.unload_asked(body.keep_alive):
            self._serving.unload(info.id)
            return _loaded(body.model, empty, reason="unload")
        resolved = await self._serving.load(info)
        if not body.messages:
            self._serving.keep_alive(body.keep_alive, resolved.spec.id)
            return _loaded(body.model, empty)
        images = ImageList()
        messages = _template_messages(body.messages, images)
        generate = _generate_request(body, info, messages=messages, tools=tools, images=images)

        def line(piece: Piece) -> dict[str, Any]:
            return protocol.chat_line(body.model, piece.message())

        answer = _Answer(line, body.think, started, resolved)
        return await self._answer(request, body.stream, generate, answer)

    async def generate(self, request: Request) -> Response:
        started = time.perf_counter()
        body = await parse_body(request, protocol.GenerateRequest)
        log_ignored(request.url.path, body.options)
        if body.template:
            raise APIError(
                400,
                "template overrides are not supported: Sidelight applies the model's own chat "
                "template (send raw: true to pass a prompt through untouched)",
            )
        if body.context:
            raise APIError(
                400, "context token arrays are not supported; send the history to /api/chat"
            )
        info = await self._serving.find(body.model, "generate")
        check_request(info, body.model, tools=False, think=body.think)
        images = ImageList()
        prompt, messages = _generate_input(body, info, images)
        if not body.prompt and not body.suffix and self._serving.unload_asked(body.keep_alive):
            # Ollama's documented way to unload a model: an empty prompt with keep_alive 0.
            self._serving.unload(info.id)
            return _loaded(body.model, {"response": ""}, reason="unload")
        resolved = await self._serving.load(info)
        if not body.prompt and not body.suffix and not body.images:
            self._serving.keep_alive(body.keep_alive, resolved.spec.id)
            return _loaded(body.model, {"response": ""})
        generate = _generate_request(
            body, info, messages=messages, prompt=prompt, suffix=body.suffix or None, images=images
        )

        def line(piece: Piece) -> dict[str, Any]:
            return protocol.generate_line(body.model, piece.content, piece.thinking)

        answer = _Answer(line, body.think, started, resolved)
        return await self._answer(request, body.stream, generate, answer)

    async def _answer(
        self, request: Request, streamed: bool, generate: GenerateRequest, answer: _Answer
    ) -> Response:
        pipeline = self._serving.pipeline
        if streamed:
            generation = await pipeline.start(generate)
            return NDJSONResponse(answer.lines(generation))
        reply = await unless_disconnected(request, pipeline.collect(generate))
        body = answer.line(whole(reply, answer.think))
        body.update(answer.final(reply.done))
        return JSONResponse(body)


def _generate_request(
    body: protocol.ChatRequest | protocol.GenerateRequest,
    info: ModelInfo,
    *,
    messages: list[dict[str, Any]] | None,
    prompt: str | None = None,
    suffix: str | None = None,
    tools: list[dict[str, Any]] | None = None,
    images: ImageList | None = None,
) -> GenerateRequest:
    """The pipeline's request for /api/chat (messages) or /api/generate (either)."""
    return GenerateRequest(
        images=images.all() if images is not None else (),
        model=info.id,
        dialect="ollama",
        messages=messages,
        prompt=prompt,
        suffix=suffix,
        max_tokens=max_tokens(body.options),
        context_limit=num_ctx(body.options),
        stop=stop(body.options),
        sampling=sampling(body.options),
        tools=tools or [],
        response_schema=format_schema(body.format),
        schema_param="format",
        thinking=thinking(info, body.think),
        split_reasoning=info.reasoning,  # what the model's files say, as /api/show does
        keep_alive=None if body.keep_alive is None else parse_keep_alive(body.keep_alive),
        # /api/generate's prompt is templated into messages: refusals name its own field.
        field_names=_GENERATE_FIELDS if isinstance(body, protocol.GenerateRequest) else {},
    )


_GENERATE_FIELDS = {"messages": "prompt", "max_tokens": "options.num_predict"}


class _Answer:
    """Renders one request's events as Ollama's lines and final statistics."""

    def __init__(self, line: LineMaker, think: Think, started: float, resolved: Resolved) -> None:
        self.line, self.think = line, think
        self._started, self._resolved = started, resolved

    async def lines(self, generation: Generation) -> AsyncIterator[str]:
        """A line per part, then the last line with ``done: true``; a failure after the
        stream started is one ``{"error": ...}`` line."""
        try:
            async for event in generation:
                if isinstance(event, Done):
                    last = self.line(Piece())
                    last.update(self.final(event))
                    yield ndjson(last)
                elif (part := piece(event, self.think)) is not None:
                    yield ndjson(self.line(part))
        except APIError as exc:
            yield ndjson({"error": exc.message})

    def final(self, done: Done) -> dict[str, Any]:
        return protocol.final_fields(
            "length" if done.finish_reason == "length" else "stop",
            total_seconds=time.perf_counter() - self._started,
            load_seconds=self._resolved.load_seconds,
            prompt_tokens=done.usage.prompt_tokens,
            prompt_seconds=done.timings.ttft_seconds,
            completion_tokens=done.usage.completion_tokens,
            decode_seconds=done.timings.decode_seconds,
        )


def _loaded(model: str, fields: dict[str, Any], reason: str = "load") -> Response:
    """What Ollama answers to an empty request: the model is loaded (or unloaded)."""
    return JSONResponse(
        {
            "model": model,
            "created_at": protocol.timestamp(),
            **fields,
            "done": True,
            "done_reason": reason,
        }
    )


def _template_messages(messages: list[protocol.Message], images: ImageList) -> list[dict[str, Any]]:
    """Ollama messages as chat templates expect them (OpenAI-like, object arguments); each
    message's ``images`` (base64) go to ``images``.

    Ollama's calls carry no ids, but templates pair a tool result with its call by
    ``tool_call_id`` (Gemma 4 writes ``response:NAME``, Kimi K2 the call's id): each call
    gets ``call_<i>`` and the tool messages after it answer the calls in order, so each
    gets its call's id and, without a ``tool_name``, its call's function name."""
    out: list[dict[str, Any]] = []
    pending: list[tuple[str, str]] = []  # (id, name) of the calls not answered yet
    for i, message in enumerate(messages):
        item: dict[str, Any] = {"role": message.role, "content": message.content or ""}
        if message.images:
            item["images"] = [
                images.add(image_from_base64(data, f"messages.{i}.images.{k}"))
                for k, data in enumerate(message.images)
            ]
        if message.tool_calls:
            item["tool_calls"] = [
                {
                    "id": f"call_{index}",
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for index, c in enumerate(message.tool_calls)
            ]
            pending = [(c["id"], c["function"]["name"]) for c in item["tool_calls"]]
        elif message.role != "tool":
            pending = []
        if message.role == "tool" and pending:
            call_id, name = pending.pop(0)
            item["tool_call_id"] = call_id
            item["name"] = name
        if message.tool_name:
            item["name"] = message.tool_name
        out.append(item)
    return out


def _generate_input(
    body: protocol.GenerateRequest, info: ModelInfo, images: ImageList
) -> tuple[str | None, list[dict[str, Any]] | None]:
    """A raw prompt (``raw``, fill-in-the-middle, or no chat template) or chat messages.

    With a ``suffix`` the engine wraps prompt and suffix in the model's FIM tokens. The
    ``images`` go to ``images``: on the user message, or before a raw prompt.
    """
    indices = [
        images.add(image_from_base64(data, f"images.{k}"))
        for k, data in enumerate(body.images or [])
    ]
    prompt = body.prompt or ""
    if body.suffix:
        if info.fim_tokens is None:
            raise APIError(400, f'"{body.model}" does not support insert')
        return prompt, None
    if body.raw or not info.chat_template:
        return prompt, None
    messages = [{"role": "system", "content": body.system}] if body.system else []
    user: dict[str, Any] = {"role": "user", "content": prompt}
    if indices:
        user["images"] = indices
    messages.append(user)
    return None, messages
