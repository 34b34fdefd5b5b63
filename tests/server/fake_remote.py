"""A small OpenAI-compatible server that misbehaves on purpose: a remote for the tests of
``engine.server.remote`` (tests/server/test_remotes.py).

Its ``/v1/models`` lists ``MODELS`` models; chat completions answer by model name:

* ``stall``: never answers (the caller's read timeout ends it: a 504);
* ``die``: streams two chunks, then the connection is cut mid-body (no finish, no [DONE]);
* ``pause``: streams one chunk, then stalls (a read timeout mid-stream);
* ``tools``: streams a tool call in OpenAI's pieces (name first, the arguments in two);
* ``junk``: streams a chunk that is not JSON;
* ``refuse``: a 400 naming a field, as OpenAI shapes its errors.

Every request's ``Authorization`` header is kept in ``seen_keys``. Runs on the engine's
own :class:`ServerRunner` (uvicorn on a thread); the stalls wait on an event that
:meth:`FakeRemote.stop` sets, so nothing is left hanging.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from engine.server.runner import ServerRunner
from tests.server.harness import free_port

MODELS = 300


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n"


class _Cut(Exception):
    """Raised inside a streamed body: uvicorn drops the connection mid-body."""


class FakeRemote:
    def __init__(self) -> None:
        self.seen_keys: list[str | None] = []
        self._release: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        app = Starlette(
            routes=[
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
            ]
        )
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._runner = ServerRunner(app, "127.0.0.1", self.port)

    def start(self) -> None:
        self._runner.start()

    def stop(self) -> None:
        if self._loop is not None and self._release is not None:
            self._loop.call_soon_threadsafe(self._release.set)
        self._runner.stop()

    def _event(self) -> asyncio.Event:
        if self._release is None:
            self._loop = asyncio.get_running_loop()
            self._release = asyncio.Event()
        return self._release

    async def _models(self, request: Request) -> Response:
        self.seen_keys.append(request.headers.get("authorization"))
        data = [{"id": f"m{i:03d}", "object": "model", "owned_by": "fake"} for i in range(MODELS)]
        for name in ("stall", "die", "pause", "tools", "junk", "refuse"):
            data.insert(0, {"id": name, "object": "model", "owned_by": "fake"})
        data.append({"object": "model"})  # no id: left out, and counted
        return JSONResponse({"object": "list", "data": data})

    async def _chat(self, request: Request) -> Response:
        self.seen_keys.append(request.headers.get("authorization"))
        body = await request.json()
        model = body["model"]
        if model == "stall":
            await self._event().wait()
            return JSONResponse({})
        if model == "refuse":
            error = {"message": "temperature is too hot", "param": "temperature", "code": "bad"}
            return JSONResponse({"error": error}, status_code=400)
        return StreamingResponse(self._stream(model), media_type="text/event-stream")

    async def _stream(self, model: str) -> AsyncIterator[str]:
        yield _chunk({"role": "assistant", "content": ""})
        if model == "tools":
            call = {"index": 0, "id": "call_fake1", "type": "function"}
            yield _chunk({"tool_calls": [{**call, "function": {"name": "get_weather"}}]})
            yield _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]})
            yield _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]})
            yield _chunk({}, "tool_calls")
            yield "data: [DONE]\n\n"
            return
        if model == "junk":
            yield "data: {not json\n\n"
            return
        yield _chunk({"content": "partial "})
        if model == "pause":
            await self._event().wait()
            return
        yield _chunk({"content": "answer"})
        raise _Cut  # "die": the body ends without its last chunk
