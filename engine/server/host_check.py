"""Reject requests whose ``Host`` header is not this server (DNS-rebinding defence).

A web page on evil.example can resolve its own name to 127.0.0.1 and then talk to a local
server; the browser still sends ``Host: evil.example``. Only loopback names, the bind
address and explicitly allowed names get through.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from engine.server.errors import error_response

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


class HostCheckMiddleware:
    def __init__(self, app: ASGIApp, allowed_hosts: frozenset[str]) -> None:
        self.app = app
        self.allowed = LOOPBACK_NAMES | {h.lower() for h in allowed_hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = _host_name(scope)
        if host is None or not self._allowed(host):
            response = error_response(
                403,
                f"requests for host '{host}' are not allowed; use 127.0.0.1 or localhost",
                code="host_not_allowed",
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _allowed(self, host: str) -> bool:
        return host in self.allowed or host.startswith("127.") or host.endswith(".localhost")


def _host_name(scope: Scope) -> str | None:
    for key, value in scope.get("headers", []):
        if key == b"host":
            text: str = value.decode("latin-1").strip().lower()
            if text.startswith("["):  # [::1]:port
                return text.split("]", 1)[0] + "]"
            return text.rsplit(":", 1)[0] if text.count(":") == 1 else text
    return None
