"""Optional API key, required when bound beyond loopback.

Sent as ``Authorization: Bearer KEY`` (OpenAI's clients) or ``x-api-key: KEY`` (Anthropic's).

Preflight (OPTIONS) and ``/health`` stay open so browsers and monitors work without the key.
``/health`` without the key tells a client on this machine everything, and one from
elsewhere only its ``status``: the models, pids, memory budget and last error are for the
key holder, and an anonymous probe never revives a paused engine
(:func:`health_status_only` says which the route answers).
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import Final

from starlette.types import ASGIApp, Receive, Scope, Send

from engine.server.errors import refusal

OPEN_PATHS = frozenset({"/health"})
_STATUS_ONLY: Final = "sidelight.health_status_only"  # the scope key this middleware sets


def health_status_only(scope: Scope) -> bool:
    """Whether ``/health`` answers only ``{"status": ...}`` to this request: it came from
    beyond loopback without the key (set by :class:`ApiKeyMiddleware`; without one, no key
    is configured and the server is bound to loopback)."""
    return bool(scope.get(_STATUS_ONLY))


def loopback_peer(scope: Scope) -> bool:
    """Whether the request's peer address is a loopback one (IPv4-mapped too). An unknown
    peer (no address, a Unix socket) is not."""
    client = scope.get("client")
    return client is not None and is_loopback_address(str(client[0]))


def is_loopback_address(text: str) -> bool:
    """Whether ``text`` is a loopback IP address (``127.0.0.0/8``, ``::1``, IPv4-mapped);
    anything that does not parse as an address is not."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


class ApiKeyMiddleware:
    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self._key = api_key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] == "OPTIONS" or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        if scope["path"] in OPEN_PATHS:
            if not loopback_peer(scope):
                scope = {**scope, _STATUS_ONLY: True}
            await self.app(scope, receive, send)
            return
        response = refusal(
            scope,
            401,
            "Incorrect or missing API key. Send it as 'Authorization: Bearer <key>' or "
            "'x-api-key: <key>'.",
            code="invalid_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        )
        await response(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        for key, value in scope.get("headers", []):
            if key == b"authorization":
                scheme, _, token = value.partition(b" ")
                if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._key):
                    return True
            elif key == b"x-api-key" and hmac.compare_digest(value.strip(), self._key):
                return True
        return False
