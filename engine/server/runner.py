"""Run uvicorn on a background thread with a clean start and stop.

The CLI and the desktop app embed the same runner. The socket is bound here first so a port
in use is a clear error on the caller's thread, not a log line on the server's.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time

import uvicorn
from starlette.types import ASGIApp

logger = logging.getLogger(__name__)


class PortInUseError(OSError):
    """The port is taken (another Sidelight, or another server)."""


class ServerRunner:
    """uvicorn in a thread. ``start()`` returns once it accepts connections.

    Threading: call ``start``/``stop`` from one controlling thread; uvicorn never touches
    signal handlers here (they belong to the main thread's owner).
    """

    def __init__(self, app: ASGIApp, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_config=None,
            access_log=False,
            lifespan="on",  # the app moves engine reading onto this loop
            timeout_graceful_shutdown=3,
            ws="none",
        )
        self._server = uvicorn.Server(self._config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

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
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.EADDRINUSE, getattr(errno, "WSAEADDRINUSE", -1)):
            raise PortInUseError(
                exc.errno, f"port {port} on {host} is already in use; pick another with --port"
            ) from exc
        raise
    sock.listen(128)
    sock.set_inheritable(True)
    return sock
