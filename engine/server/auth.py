"""Optional API key, required when bound beyond loopback.

Sent as ``Authorization: Bearer KEY`` (OpenAI's clients) or ``x-api-key: KEY`` (Anthropic's).

Preflight (OPTIONS) and ``/health`` stay open so browsers and monitors work without the key.
"""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from engine.server.errors import refusal

OPEN_PATHS = frozenset({"/health"})


class ApiKeyMiddleware:
    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self._key = api_key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] == "OPTIONS"
            or scope["path"] in OPEN_PATHS
            or self._authorized(scope)
        ):
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
