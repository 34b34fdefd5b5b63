"""Idle-socket floods for the connection-limit tests: sockets that connect and send nothing
or half a request head, and what the server did to them (answered, closed), read without
waiting (``select`` with no timeout; the tests poll with :func:`tests.waiting.wait_until`)."""

from __future__ import annotations

import select
import socket

# More than the socket backstop (256) holds.
FLOOD = 300
HALF_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty"


def idle_flood(
    port: int, count: int, payload: bytes | None = None, *, host: str = "127.0.0.1"
) -> list[socket.socket]:
    """``count`` sockets to the server: each sends ``payload``, or by default every fifth
    half a request head and the others nothing."""
    sockets = []
    for index in range(count):
        sock = socket.create_connection((host, port), timeout=30)
        sent = payload if payload is not None else (HALF_HEAD if index % 5 == 0 else b"")
        if sent:
            sock.sendall(sent)
        sockets.append(sock)
    return sockets


def readable(sockets: list[socket.socket]) -> list[int]:
    """Indexes of the sockets with something to read (an answer, or the server's close)."""
    ready, _, _ = select.select(sockets, [], [], 0)
    return sorted(sockets.index(sock) for sock in ready)


def answer(sock: socket.socket) -> bytes:
    """One whole HTTP answer (head and its ``content-length`` of body) from ``sock``."""
    sock.settimeout(30)
    data = b""
    while b"\r\n\r\n" not in data:
        data += _recv(sock)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += _recv(sock)
    return head + b"\r\n\r\n" + body


def _recv(sock: socket.socket) -> bytes:
    chunk = sock.recv(65536)
    if not chunk:
        raise AssertionError("the server closed the connection before its answer ended")
    return chunk


def closed_ones(sockets: list[socket.socket], expected: int) -> list[int] | None:
    """Indexes of the sockets the server has closed, once there are ``expected`` or more."""
    closed = []
    for index in readable(sockets):
        try:
            data = sockets[index].recv(65536, socket.MSG_PEEK)
        except ConnectionResetError:
            data = b""
        if not data:
            closed.append(index)
    return closed if len(closed) >= expected else None
