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

from engine.client import RequestStream
from engine.server.errors import APIError
from engine.server.model_info import ModelInfo
from engine.server.ollama import protocol
from engine.server.ollama.output import OutputParser, Piece, constraint, output_parser
from engine.server.ollama.serving import (
    OllamaServing,
    Resolved,
    log_ignored,
    max_tokens,
    sampling,
    stop,
)
from engine.server.ollama.streaming import NDJSONResponse, ndjson
from engine.server.streaming import unless_disconnected
from engine.worker.messages import Finished

LineMaker = Callable[[Piece], dict[str, Any]]


class GenerationServing:
    """Chat and raw/templated generation over :class:`OllamaServing`."""

    def __init__(self, serving: OllamaServing) -> None:
        self._serving = serving

    async def chat(self, request: Request) -> Response:
        started = time.perf_counter()
        body = await self._serving.openai.parse(request, protocol.ChatRequest)
        log_ignored(request.url.path, body.options)
        if any(m.images for m in body.messages):
            raise _no_images()
        info = await self._serving.find(body.model, "chat")
        parser = output_parser(info, body.model, tools=body.tools, think=body.think)
        resolved = await self._serving.load(info)
        if not body.messages:
            return _loaded(body.model, {"message": {"role": "assistant", "content": ""}})
        stream = await self._serving.openai.start(
            messages=_template_messages(body.messages),
            max_tokens=max_tokens(body.options),
            cap_max_tokens=True,
            stop=stop(body.options),
            sampling=sampling(body.options),
            chat_template_kwargs=parser.template_kwargs(),
            tools=parser.tools,
            constraint=constraint(body.format),
        )

        def line(piece: Piece) -> dict[str, Any]:
            return protocol.chat_line(body.model, piece.message())

        return await self._answer(request, body.stream, stream, parser, line, started, resolved)

    async def generate(self, request: Request) -> Response:
        started = time.perf_counter()
        body = await self._serving.openai.parse(request, protocol.GenerateRequest)
        log_ignored(request.url.path, body.options)
        if body.images:
            raise _no_images()
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
        parser = output_parser(info, body.model, tools=None, think=body.think)
        prompt, messages = _generate_input(body, info)
        resolved = await self._serving.load(info)
        if not body.prompt and not body.suffix:
            return _loaded(body.model, {"response": ""})
        stream = await self._serving.openai.start(
            prompt=prompt,
            messages=messages,
            suffix=body.suffix or None,
            max_tokens=max_tokens(body.options),
            cap_max_tokens=True,
            stop=stop(body.options),
            sampling=sampling(body.options),
            chat_template_kwargs=parser.template_kwargs() if messages else None,
            constraint=constraint(body.format),
        )

        def line(piece: Piece) -> dict[str, Any]:
            return protocol.generate_line(body.model, piece.content, piece.thinking)

        return await self._answer(request, body.stream, stream, parser, line, started, resolved)

    async def _answer(
        self,
        request: Request,
        streamed: bool,
        stream: RequestStream,
        parser: OutputParser,
        line: LineMaker,
        started: float,
        resolved: Resolved,
    ) -> Response:
        parser.begin(bool(stream.accepted and stream.accepted.opens_reasoning))
        if streamed:
            return NDJSONResponse(_lines(stream, parser, line, started, resolved))
        collected = await unless_disconnected(request, self._serving.openai.collect(stream))
        whole = Piece.join([*parser.feed(collected.text), *parser.finish()])
        answer = line(whole)
        answer.update(_final(collected.result, started, resolved))
        return JSONResponse(answer)


async def _lines(
    stream: RequestStream,
    parser: OutputParser,
    line: LineMaker,
    started: float,
    resolved: Resolved,
) -> AsyncIterator[str]:
    async for event in stream:
        if not isinstance(event, Finished):
            for piece in parser.feed(event.text):
                yield ndjson(line(piece))
            continue
        if event.finish_reason == "error":
            yield ndjson({"error": event.error or "generation failed"})
            return
        for piece in [*parser.feed(event.text), *parser.finish()]:
            yield ndjson(line(piece))
        last = line(Piece())
        last.update(_final(event, started, resolved))
        yield ndjson(last)


def _final(result: Finished, started: float, resolved: Resolved) -> dict[str, Any]:
    return protocol.final_fields(
        "length" if result.finish_reason == "length" else "stop",
        total_seconds=time.perf_counter() - started,
        load_seconds=resolved.load_seconds,
        prompt_tokens=result.prompt_tokens,
        prompt_seconds=result.ttft_seconds,
        completion_tokens=result.completion_tokens,
        decode_seconds=result.decode_seconds,
    )


def _loaded(model: str, fields: dict[str, Any]) -> Response:
    """What Ollama answers to an empty request: the model is loaded, nothing generated."""
    return JSONResponse(
        {
            "model": model,
            "created_at": protocol.timestamp(),
            **fields,
            "done": True,
            "done_reason": "load",
        }
    )


def _template_messages(messages: list[protocol.Message]) -> list[dict[str, Any]]:
    """Ollama messages as chat templates expect them (OpenAI-like, object arguments)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        item: dict[str, Any] = {"role": message.role, "content": message.content or ""}
        if message.tool_calls:
            item["tool_calls"] = [
                {
                    "id": f"call_{index}",
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for index, c in enumerate(message.tool_calls)
            ]
        if message.tool_name:
            item["name"] = message.tool_name
        out.append(item)
    return out


def _generate_input(
    body: protocol.GenerateRequest, info: ModelInfo
) -> tuple[str | None, list[dict[str, Any]] | None]:
    """A raw prompt (``raw``, fill-in-the-middle, or no chat template) or chat messages.

    With a ``suffix`` the engine wraps prompt and suffix in the model's FIM tokens.
    """
    prompt = body.prompt or ""
    if body.suffix:
        if info.fim_tokens is None:
            raise APIError(400, f'"{body.model}" does not support insert')
        return prompt, None
    if body.raw or not info.chat_template:
        return prompt, None
    messages = [{"role": "system", "content": body.system}] if body.system else []
    messages.append({"role": "user", "content": prompt})
    return None, messages


def _no_images() -> APIError:
    return APIError(400, "images are not supported: Sidelight serves text-only models")
