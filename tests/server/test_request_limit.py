"""RequestLimitMiddleware in the app (in process): requests in flight are counted until their
answer ends, a request past the cap is a 503 with ``Retry-After`` in its dialect's error
shape, and only loopback ``GET /health`` passes a full server. Real sockets and a real
server: tests/server/test_runner.py and test_connection_limits_e2e.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from engine.server.anthropic.routes import ANTHROPIC_ERRORS
from engine.server.errors import ErrorShapes
from engine.server.ollama.routes import OLLAMA_ERRORS
from engine.server.request_limit import RETRY_AFTER_SECONDS, RequestLimitMiddleware

CAP = 3


class _Held:
    """Routes whose answers wait for the test: a plain one and a stream after its first part."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started = 0

    async def plain(self, request: Request) -> Response:
        self.started += 1
        await self.release.wait()
        return PlainTextResponse("done")

    async def stream(self, request: Request) -> Response:
        async def parts() -> AsyncIterator[bytes]:
            self.started += 1
            yield b"first "
            await self.release.wait()
            yield b"last"

        return StreamingResponse(parts())


def _app(held: _Held) -> Starlette:
    paths = ["/v1/chat/completions", "/v1/messages", "/api/chat"]
    routes = [Route(path, held.plain, methods=["GET", "POST"]) for path in paths]
    routes += [Route("/stream", held.stream), Route("/health", held.plain)]
    app = Starlette(
        routes=routes, middleware=[Middleware(RequestLimitMiddleware, max_requests=CAP)]
    )
    app.state.error_shapes = ErrorShapes([ANTHROPIC_ERRORS, OLLAMA_ERRORS])
    return app


def _client(app: Starlette, peer: str = "127.0.0.1") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(peer, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1")


async def _until(condition: Callable[[], bool]) -> None:
    """Let the held requests reach their wait (the loop runs them; no clock involved)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the held requests never started")


async def test_past_the_cap_each_dialect_gets_its_own_503_shape() -> None:
    held = _Held()
    app = _app(held)
    async with _client(app) as client:
        streams = [asyncio.create_task(client.get("/stream")) for _ in range(CAP)]
        await _until(lambda: held.started == CAP)
        openai, anthropic, ollama = [
            await client.post(path, json={})
            for path in ("/v1/chat/completions", "/v1/messages", "/api/chat")
        ]
        held.release.set()
        answers = await asyncio.gather(*streams)
    assert [a.text for a in answers] == ["first last"] * CAP  # a stream counts to its end
    for refused in (openai, anthropic, ollama):
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == str(RETRY_AFTER_SECONDS)
    assert openai.json()["error"]["code"] == "too_many_requests_in_flight"
    assert anthropic.json()["type"] == "error" and "limit" in anthropic.json()["error"]["message"]
    assert isinstance(ollama.json()["error"], str) and "limit" in ollama.json()["error"]


async def test_loopback_health_passes_a_full_server_and_is_not_counted() -> None:
    held = _Held()
    app = _app(held)
    async with (
        _client(app) as local,
        _client(app, "::ffff:127.0.0.1") as mapped,
        _client(app, "192.0.2.7") as remote,
    ):
        waits = [asyncio.create_task(local.post("/v1/messages")) for _ in range(CAP)]
        await _until(lambda: held.started == CAP)
        health = asyncio.create_task(local.get("/health"))  # held too, yet not refused
        ipv6_mapped = asyncio.create_task(mapped.get("/health"))
        await _until(lambda: held.started == CAP + 2)
        remote_health = await remote.get("/health")
        local_post_health = await local.post("/health")
        held.release.set()
        answers = await asyncio.gather(*waits, health, ipv6_mapped)
    assert [a.status_code for a in answers] == [200] * (CAP + 2)
    assert remote_health.status_code == 503  # beyond loopback it is counted like any request
    assert local_post_health.status_code == 503  # only GET /health is exempt


async def test_a_finished_request_frees_its_place() -> None:
    held = _Held()
    held.release.set()
    async with _client(_app(held)) as client:
        answers = [await client.get(path) for path in ["/stream", "/api/chat"] * CAP * 2]
    assert [a.status_code for a in answers] == [200] * (CAP * 4)
