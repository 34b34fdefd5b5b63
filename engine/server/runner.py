"""Run uvicorn on a background thread with a clean start and stop.

The CLI and the desktop app embed the same runner. The socket is bound here first so a port
in use is a clear error on the caller's thread, not a log line on the server's.

Connections are bounded for a laptop, on what they cost rather than on their number: the
app caps requests in flight (:mod:`engine.server.request_limit`; uvicorn's
``limit_concurrency``, which counted idle sockets too, is off), and the protocol keeps at
most 256 sockets open, 64 per remote address, closing the longest-idle one to make room
(:mod:`engine.server.connection_table`). An idle keep-alive connection closes after
:data:`KEEP_ALIVE_SECONDS`, and a request head must arrive within
:data:`engine.server.connection.HEAD_SECONDS` (:mod:`engine.server.connection`).
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time

import uvicorn
from starlette.types import ASGIApp

from engine.server.connection import HEAD_SECONDS, guarded_protocol
from engine.server.connection_table import ConnectionTable

logger = logging.getLogger(__name__)

# Longer than the idle expiry of client pools (httpx 5 s, Node 4 s), so a client never sends
# on a connection the server is closing; short enough that idle sockets do not pile up.
KEEP_ALIVE_SECONDS = 20
# Addresses that bind every interface, and the loopback address a local client uses instead.
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "[::]": "::1"}


class PortInUseError(OSError):
    """The port is taken (another Sidelight, or another server)."""


class ServerRunner:
    """uvicorn in a thread. ``start()`` returns once it accepts connections.

    Threading: call ``start``/``stop`` from one controlling thread; uvicorn never touches
    signal handlers here (they belong to the main thread's owner).
    """

    def __init__(
        self,
        app: ASGIApp,
        host: str,
        port: int,
        *,
        head_seconds: float = HEAD_SECONDS,
        connections: ConnectionTable | None = None,
    ) -> None:
        self.host, self.port = host.removeprefix("[").removesuffix("]"), port
        # Changed on the server's loop only; other threads may read its counts (tests do).
        self.connections = ConnectionTable() if connections is None else connections
        self._config = uvicorn.Config(
            app,
            host=self.host,
            port=port,
            log_config=None,
            access_log=False,
            lifespan="on",  # the app moves engine reading onto this loop
            timeout_graceful_shutdown=3,
            ws="none",
            http=guarded_protocol(head_seconds, self.connections),
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
            # Not uvicorn's cap: it counts sockets, idle ones too, and answers 503 before a
            # request is parsed (64 idle sockets locked everyone out). The app counts
            # requests instead, and the connection table bounds the sockets.
            limit_concurrency=None,
        )
        self._server = uvicorn.Server(self._config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The URL a client on this machine uses: never a wildcard such as ``0.0.0.0``.

        A server bound to every interface is reachable on loopback from here whatever the
        network does (a LAN address changes with DHCP, Wi-Fi and VPNs, and a machine has
        several), so that is the URL shown and copied; other machines use this machine's
        address, which their user knows better than the server does.
        """
        return _http_url(_WILDCARDS.get(self.host, self.host), self.port)

    @property
    def bind_url(self) -> str:
        """The address the socket is bound to (``http://0.0.0.0:11680`` for every interface)."""
        return _http_url(self.host, self.port)

    def start(self, timeout: float = 15.0) -> None:
        """Bind and serve.

        Raises:
            PortInUseError: the port is already in use.
            RuntimeError: uvicorn failed to start.
        """
        sock = _bind(self.host, self.port)
        self.port = sock.getsockname()[1]  # port 0 picks a free one
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="http-server", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                sock.close()
                raise RuntimeError("the HTTP server failed to start; see the log")
            time.sleep(0.01)

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(timeout)
        self._thread = None


def _http_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on connections whose socket says
    # so, and without it Nagle holds each small SSE write for the client's delayed ACK (~40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    if hasattr(socket, "SO_EXCLUSIVEADDRUSE"):  # Windows: refuse to share the port
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_EXCLUSIVEADDRUSE, 1)
    else:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except socket.gaierror as exc:
        sock.close()
        raise OSError(
            exc.errno, f"cannot listen on {host}: no such address here ({exc.strerror})"
        ) from exc
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.EADDRINUSE, getattr(errno, "WSAEADDRINUSE", -1)):
            raise PortInUseError(
                exc.errno, f"port {port} on {host} is already in use; pick another with --port"
            ) from exc
        raise OSError(exc.errno, f"cannot listen on {host} port {port}: {exc.strerror}") from exc
    sock.listen(128)
    sock.set_inheritable(True)
    return sock
