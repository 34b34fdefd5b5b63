"""ServerRunner: binds first (clear port errors), serves on a thread, stops cleanly."""

from __future__ import annotations

import socket

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from engine.server.runner import PortInUseError, ServerRunner


async def _nodelay(request: Request) -> PlainTextResponse:
    """Report TCP_NODELAY of this request's own connection (found among live sockets)."""
    port = request.scope["client"][1]
    for sock in _connection_sockets():
        if sock.getpeername()[1] == port:
            return PlainTextResponse(str(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)))
    return PlainTextResponse("not found")


def _connection_sockets() -> list[socket.socket]:
    import gc

    return [
        obj for obj in gc.get_objects()
        if isinstance(obj, socket.socket) and obj.fileno() != -1 and _is_connected(obj)
    ]  # fmt: skip


def _is_connected(sock: socket.socket) -> bool:
    try:
        sock.getpeername()
    except OSError:
        return False
    return sock.family == socket.AF_INET


def test_connections_disable_nagle() -> None:
    """Without TCP_NODELAY each small write waits for the client's delayed ACK (~40 ms)."""
    app = Starlette(routes=[Route("/nodelay", _nodelay)])
    runner = ServerRunner(app, "127.0.0.1", 0)
    runner.start()
    try:
        with httpx.Client() as client:
            answers = [client.get(f"{runner.url}/nodelay").text for _ in range(3)]
    finally:
        runner.stop()
    assert answers and all(a not in ("0", "not found") for a in answers), answers


def test_port_in_use() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        runner = ServerRunner(Starlette(), "127.0.0.1", taken.getsockname()[1])
        with pytest.raises(PortInUseError, match="already in use"):
            runner.start()


def test_start_and_stop_twice() -> None:
    runner = ServerRunner(Starlette(), "127.0.0.1", 0)
    runner.start()
    assert runner.port > 0
    assert httpx.get(f"{runner.url}/").status_code == 404
    runner.stop()
    runner.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{runner.url}/", timeout=2)
