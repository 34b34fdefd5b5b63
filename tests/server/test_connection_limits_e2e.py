"""Connection limits on a real ``sidelight serve`` (issue 25, finding 5): idle sockets never
lock clients out, and requests past the in-flight cap are 503 with ``Retry-After`` in their
dialect's shape while loopback ``/health`` answers.

Before the fix uvicorn counted sockets: 70 idle ones made 9 of 32 chats and ``/health`` 503.
Runs on the shared server (the demo model): nothing here outlasts the test.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from engine.server.connection_table import MAX_OPEN
from engine.server.request_limit import MAX_REQUESTS
from tests.server.conftest import DEMO
from tests.server.harness import ServerProcess
from tests.server.idle_sockets import FLOOD, answer, closed_ones, idle_flood, readable
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

_HELD_BODY = b'{"model": "sidelight-demo", "messages": ['  # of 1,000 bytes announced
_HELD = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n" + _HELD_BODY
)


@pytest.fixture
def flood(server: ServerProcess) -> Iterator[list[socket.socket]]:
    """300 idle sockets to the server, every fifth half a request head in."""
    sockets = idle_flood(server.port, FLOOD)
    yield sockets
    for sock in sockets:
        sock.close()


def _chat(server: ServerProcess) -> httpx.Response:
    body = {"model": DEMO, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    return httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=120)


def _at_least(indexes: list[int], count: int) -> list[int] | None:
    return indexes if len(indexes) >= count else None


def _served(response: httpx.Response) -> httpx.Response | None:
    return response if response.status_code == 200 else None


def test_idle_sockets_leave_every_request_and_health_answered(
    server: ServerProcess, flood: list[socket.socket]
) -> None:
    # The table is full: the newest 256 are held, the 44 oldest were closed for them.
    closed = wait_until(
        lambda: closed_ones(flood, FLOOD - MAX_OPEN), "the server holding the flood", 30
    )
    assert closed == list(range(FLOOD - MAX_OPEN))
    with ThreadPoolExecutor(32) as pool:
        chats = list(pool.map(lambda _: _chat(server), range(32)))
    health = server.health()
    assert [c.status_code for c in chats] == [200] * 32, [c.text[:200] for c in chats]
    assert all(c.json()["choices"][0]["message"]["content"] for c in chats)
    assert health.status_code == 200 and health.json()["status"] == "ready"


def test_requests_past_the_cap_are_503_in_their_dialect_while_health_answers(
    server: ServerProcess,
) -> None:
    """65+ requests in flight (bodies still arriving): the extra ones are refused at once."""
    extra = 6
    held = idle_flood(server.port, MAX_REQUESTS + extra, _HELD)
    try:
        answered = wait_until(
            lambda: _at_least(readable(held), extra), "the requests past the cap answered", 60
        )
        assert len(answered) == extra, answered  # the other 64 are still in flight
        for index in answered:
            refusal = answer(held[index])
            head, _, body = refusal.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 503"), refusal
            assert b"\r\nretry-after: 2" in head.lower(), refusal
            assert json.loads(body)["error"]["code"] == "too_many_requests_in_flight"
        health = server.health()
        assert health.status_code == 200 and health.json()["status"] == "ready"
        anthropic = httpx.post(
            f"{server.base_url}/v1/messages",
            json={"model": DEMO, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]},
            timeout=30,
        )
        ollama = httpx.post(f"{server.base_url}/api/chat", json={"model": DEMO}, timeout=30)
        assert anthropic.status_code == ollama.status_code == 503
        assert anthropic.headers["retry-after"] == ollama.headers["retry-after"] == "2"
        assert anthropic.json()["type"] == "error"
        assert isinstance(ollama.json()["error"], str)
    finally:
        for sock in held:
            sock.close()
    chat = wait_until(
        lambda: _served(_chat(server)), "a chat served again once the held requests ended", 60
    )
    assert chat.json()["choices"][0]["message"]["content"]
