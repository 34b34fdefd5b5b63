"""ServerRunner: binds first (clear port errors), serves on a thread, stops cleanly; bounds
slow, idle and excess connections (real sockets throughout)."""

from __future__ import annotations

import contextlib
import socket
import time

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from engine.server.body_limit import BodyLimitMiddleware
from engine.server.runner import MAX_CONNECTIONS, PortInUseError, ServerRunner


async def _nodelay(request: Request) -> PlainTextResponse:
    """Report TCP_NODELAY of this request's own connection (found among live sockets)."""
    port = request.scope["client"][1]
    for sock in _connection_sockets():
        with contextlib.suppress(OSError):  # another thread may close it meanwhile
            if sock.getpeername()[1] == port:
                nodelay = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
                return PlainTextResponse(str(nodelay))
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


# ---- connection bounds (real sockets) ---------------------------------------------------


async def _hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


async def _echo_length(request: Request) -> PlainTextResponse:
    return PlainTextResponse(str(len(await request.body())))


def _runner(head_seconds: float = 1.0, body_seconds: float = 1.0) -> ServerRunner:
    app = Starlette(
        routes=[Route("/", _hello), Route("/body", _echo_length, methods=["POST"])],
        middleware=[Middleware(BodyLimitMiddleware, max_bytes=1 << 20, max_seconds=body_seconds)],
    )
    runner = ServerRunner(app, "127.0.0.1", 0, head_seconds=head_seconds)
    runner.start()
    return runner


def _closed_after(sock: socket.socket, trickle: bytes = b"", limit: float = 10.0) -> float:
    """Seconds until the server closes ``sock``, sending ``trickle`` a byte at a time."""
    started = time.monotonic()
    sock.settimeout(0.2)
    while time.monotonic() - started < limit:
        if trickle:
            with contextlib.suppress(OSError):
                sock.sendall(trickle[:1])
            trickle = trickle[1:]
        try:
            data = sock.recv(4096)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return time.monotonic() - started
        while data:  # the 408, then the close
            data = sock.recv(4096)
        return time.monotonic() - started
    raise AssertionError(f"the connection was still open after {limit}s")


def test_slow_request_headers_are_cut_off() -> None:
    """A slowloris client (headers a byte every 0.2 s, forever) is closed at the deadline."""
    runner = _runner(head_seconds=1.0)
    try:
        with socket.create_connection(("127.0.0.1", runner.port)) as sock:
            endless = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Slow: " + b"a" * 200
            assert 0.9 < _closed_after(sock, endless) < 3.0
    finally:
        runner.stop()


def test_a_silent_connection_is_closed() -> None:
    runner = _runner(head_seconds=1.0)
    try:
        with socket.create_connection(("127.0.0.1", runner.port)) as sock:
            assert 0.9 < _closed_after(sock) < 3.0
    finally:
        runner.stop()


def test_keep_alive_outlives_the_head_deadline() -> None:
    """Between requests the keep-alive timeout applies, not the head deadline."""
    runner = _runner(head_seconds=0.5)
    try:
        with httpx.Client() as client:
            first = client.get(f"{runner.url}/")
            time.sleep(1.5)
            second = client.get(f"{runner.url}/")
        assert first.text == second.text == "hello"
        assert first.extensions["network_stream"] is second.extensions["network_stream"]
    finally:
        runner.stop()


def test_a_slow_body_is_408() -> None:
    runner = _runner(body_seconds=1.0)
    try:
        with socket.create_connection(("127.0.0.1", runner.port)) as sock:
            sock.sendall(
                b"POST /body HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\nabc"
            )
            sock.settimeout(5)
            started = time.monotonic()
            answer = sock.recv(4096)
            assert answer.startswith(b"HTTP/1.1 408"), answer
            assert time.monotonic() - started < 3.0
    finally:
        runner.stop()


def test_connections_are_capped_and_held_ones_expire() -> None:
    """Idle sockets fill the connection cap (503), then the head deadline frees it."""
    runner = _runner(head_seconds=1.5)
    held = [socket.create_connection(("127.0.0.1", runner.port)) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.2)
        assert httpx.get(f"{runner.url}/").status_code == 503
        time.sleep(2.0)
        assert httpx.get(f"{runner.url}/").text == "hello"
    finally:
        for sock in held:
            sock.close()
        runner.stop()


def test_a_wildcard_bind_gives_a_loopback_url() -> None:
    """What the tray copies and the CLI prints: never http://0.0.0.0 (not connectable)."""
    runner = ServerRunner(Starlette(routes=[Route("/", _hello)]), "0.0.0.0", 0)
    runner.start()
    try:
        assert runner.url == f"http://127.0.0.1:{runner.port}"
        assert runner.bind_url == f"http://0.0.0.0:{runner.port}"
        assert httpx.get(f"{runner.url}/").text == "hello"
    finally:
        runner.stop()


def test_an_unresolvable_host_is_one_clear_error() -> None:
    runner = ServerRunner(Starlette(), "127.evil.example", 0)
    with pytest.raises(OSError, match=r"cannot listen on 127\.evil\.example") as caught:
        runner.start()
    assert "\n" not in str(caught.value)
