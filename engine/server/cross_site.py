"""Refuse cross-site browser requests before any work is done (CSRF defence).

CORS only decides whether a page may *read* an answer; the request itself still runs. A
page on any site can send a "simple" request with no preflight: a POST whose body is
``text/plain``, ``application/x-www-form-urlencoded`` or ``multipart/form-data`` (or has no
Content-Type). A ``text/plain`` body can be JSON, so without this guard any web page could
start a generation, or load and switch models, on the user's machine.

The rules, applied to every request:

1. An ``Origin`` header that is not an allowed origin (the ``allowed_origins`` setting:
   localhost pages and VS Code webviews by default) is a 403. Browsers send ``Origin`` on
   every cross-origin request and on every POST, so this stops the attack in any current
   browser. Allowed origins keep working, preflight included. ``Origin: null`` (sandboxed
   frames, ``file:`` pages) is not allowed.
2. A request with a body must say it is JSON (``application/json`` or ``application/*+json``),
   with two exceptions kept for clients outside browsers: no Content-Type, and
   ``application/x-www-form-urlencoded``, are accepted when the request carries no browser
   marker (no ``Origin``, no ``Sec-Fetch-Site``). ``curl -d '{...}'`` sends that form type,
   and Ollama's own documentation uses it; a browser form can never produce a JSON body in
   that encoding anyway (it percent-encodes braces and quotes). Everything else is a 415:
   ``text/plain`` and ``multipart/form-data`` always (they are how a page smuggles JSON
   past a preflight, and no API client sends them), any other type, and the two exceptions
   when a browser marker is present. The ``openai`` and ``ollama`` clients, LangChain, IDE
   plugins and ``curl -H 'Content-Type: application/json'`` all send JSON. One more
   exception: OpenAI's audio upload paths (``/v1/audio/transcriptions``, ``translations``)
   take ``multipart/form-data``, as OpenAI's API does, from a client with no browser marker
   or from an allowed origin (rule 1 has refused every other origin by then); an audio file
   cannot smuggle a JSON request, and those paths read nothing but a form.

Requests without a body (GET, preflight OPTIONS, an empty POST) pass rule 2.
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Receive, Scope, Send

from engine.echo import clip
from engine.server.errors import refusal

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Accepted from clients that are not browsers (rule 2's exceptions).
_NON_BROWSER_TYPES = frozenset({"", "application/x-www-form-urlencoded"})
# Paths whose API is a multipart upload (rule 2's last exception).
_MULTIPART_PATHS = frozenset({"/v1/audio/transcriptions", "/v1/audio/translations"})


class CrossSiteGuard:
    """The two rules of the module docstring, as ASGI middleware (stateless, loop-only)."""

    def __init__(self, app: ASGIApp, allowed_origins: re.Pattern[str]) -> None:
        self.app = app
        self.allowed_origins = allowed_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        origin = headers.get("origin")
        if origin is not None and not self.allowed_origins.fullmatch(origin):
            response = refusal(
                scope,
                403,
                f"requests from the web origin {clip(origin)!r} are not allowed; add it to "
                "allowed_origins in Sidelight's settings if you trust it",
                code="origin_not_allowed",
            )
            await response(scope, receive, send)
            return
        if scope["method"] in _BODY_METHODS and _has_body(headers):
            media_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            browser = origin is not None or "sec-fetch-site" in headers
            upload = (
                media_type == "multipart/form-data"
                and scope["path"] in _MULTIPART_PATHS
                and (origin is not None or not browser)
            )
            if (
                not _is_json(media_type)
                and not upload
                and (browser or media_type not in _NON_BROWSER_TYPES)
            ):
                shown = media_type or "none"
                response = refusal(
                    scope,
                    415,
                    f"the request body must be JSON sent with 'Content-Type: application/json' "
                    f"(got Content-Type: {clip(shown)})",
                    code="unsupported_media_type",
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lowercase name (the first of repeated ones)."""
    found: dict[str, str] = {}
    for key, value in scope.get("headers", []):
        found.setdefault(key.decode("latin-1"), value.decode("latin-1"))
    return found


def _has_body(headers: dict[str, str]) -> bool:
    length = headers.get("content-length", "").strip()
    return "transfer-encoding" in headers or (
        length.isascii() and length.isdigit() and int(length) > 0
    )


def _is_json(media_type: str) -> bool:
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )
