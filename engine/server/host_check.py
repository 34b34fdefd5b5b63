"""Reject requests whose ``Host`` header is not this server (DNS-rebinding defence).

A web page on evil.example can resolve its own name to 127.0.0.1 and then talk to a local
server; the browser still sends ``Host: evil.example``. So a server bound to loopback
answers only these hosts (any port):

- a loopback IP address, parsed as one (``127.0.0.1``, ``127.8.9.1``, ``[::1]``); a name
  that merely starts with ``127.`` (``127.0.0.1.rebind.example``) is a name, not an address;
- ``localhost`` and ``*.localhost`` (RFC 6761: they never leave the machine, and browsers
  resolve them to loopback themselves);
- names listed in the ``allowed_hosts`` setting, exactly.

A server bound beyond loopback (``--host 0.0.0.0`` or a LAN address) is reached under names
and addresses this check cannot know, so :func:`engine.server.app.create_app` leaves it out
there, as Ollama does; the API key, required for such binds, is the guard instead.
"""

from __future__ import annotations

import ipaddress
import re

from starlette.types import ASGIApp, Receive, Scope, Send

from engine.echo import clip
from engine.server.errors import refusal

_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_PORT = re.compile(r"[0-9]{1,5}")


class HostCheckMiddleware:
    def __init__(self, app: ASGIApp, allowed_hosts: frozenset[str]) -> None:
        self.app = app
        self.allowed = frozenset(h.strip().lower() for h in allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        header = _host_header(scope)
        if header is None or not self.allows(header):
            shown = "(none)" if header is None else repr(clip(header))
            response = refusal(
                scope,
                403,
                f"requests for host {shown} are not allowed; use 127.0.0.1 or localhost",
                code="host_not_allowed",
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def allows(self, header: str) -> bool:
        """Whether a ``Host`` header value names this (loopback-bound) server."""
        host = host_name(header)
        return host is not None and (host in self.allowed or is_loopback_name(host))


def host_name(header: str) -> str | None:
    """The host of a ``Host`` header, lowercase, brackets kept for IPv6; ``None`` if malformed.

    ``name``, ``name:port``, ``1.2.3.4:port``, ``[v6]`` and ``[v6]:port`` are well formed;
    a bare IPv6 address (colons, no brackets) or a non-numeric port is not.
    """
    text = header.strip().lower()
    if text.startswith("["):
        host, bracket, rest = text.partition("]")
        if not bracket or (rest and not (rest[:1] == ":" and _PORT.fullmatch(rest[1:]))):
            return None
        return host + "]"
    host, colon, port = text.partition(":")
    if colon and not _PORT.fullmatch(port):
        return None
    return host or None


def is_loopback_name(host: str) -> bool:
    """A loopback IP (``127.0.0.0/8``, ``[::1]``), ``localhost`` or a ``*.localhost`` name."""
    if host.startswith("[") and host.endswith("]"):
        try:
            ip = ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return False
        return ip.is_loopback or (ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback)
    try:
        return ipaddress.IPv4Address(host).is_loopback
    except ValueError:
        pass
    labels = host.split(".")
    return labels[-1] == "localhost" and all(_LABEL.fullmatch(label) for label in labels)


def _host_header(scope: Scope) -> str | None:
    for key, value in scope.get("headers", []):
        if key == b"host":
            text: str = value.decode("latin-1")
            return text
    return None
