"""The HTTP side of request monitoring: every API call that sends work is opened on
arrival and closed after the last byte of its answer.

Observed: requests with a method other than GET, HEAD and OPTIONS (generations,
embeddings, token counts...). Listings, probes and scrapes are not: a plugin polling
``/api/tags`` every few seconds would push everything else out of the log.

This middleware sits outermost, so refusals by the others (401 without the key, 413, a
foreign Host) are recorded too. It keeps the body only while "keep request bodies" is on,
and never a header carrying a key.

Threading: the server's event loop.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Sequence

from starlette.datastructures import Headers
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.echo import HEADER_BYTES, MESSAGE_BYTES, URL_BYTES, clip
from engine.server.monitor.monitor import RequestMonitor, bind, unbind
from engine.server.monitor.record import CLIENT_GONE_STATUS, UNMATCHED_ROUTE, Replay
from engine.server.streaming import ClientGone

_UNOBSERVED_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Headers that change an answer and carry nothing secret: what "copy as curl" replays.
_REPLAYED_HEADERS = ("content-type", "accept", "anthropic-version", "anthropic-beta")
_AUTH_HEADERS = ("authorization", "x-api-key")
MAX_KEPT_BODY = 4 * 1024 * 1024  # larger bodies are not kept (the log keeps 32 MiB in all)
_ERROR_BODY_BYTES = 16 * 1024  # how much of an error answer is read for its message
# A refused request this large is collected at once: an error's traceback holds the frames
# that hold its body, in reference cycles (asyncio futures, chained exceptions) that only the
# cycle collector frees, and it runs by object counts, not bytes; twenty 10 MB bodies then
# lingered as 300 MB more memory. A full collection costs milliseconds; parsing such a body
# costs more.
_COLLECT_AFTER_BYTES = 1024 * 1024
# Which dialect a path belongs to, until the pipeline says (first match wins).
_DIALECTS = (
    ("/v1/messages", "anthropic"),
    ("/v1/responses", "responses"),
    ("/api/", "ollama"),
    ("/v1/", "openai"),
)


class MonitorMiddleware:
    def __init__(self, app: ASGIApp, monitor: RequestMonitor, routes: Sequence[Route]) -> None:
        self.app = app
        self.monitor = monitor
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in _UNOBSERVED_METHODS:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        request = self.monitor.open(
            dialect=dialect_for_path(scope["path"]),
            method=scope["method"],
            route=self._route(scope),
            user_agent=headers.get("user-agent"),
            replay=_replay(scope, headers),
        )
        body: bytearray | None = bytearray() if self.monitor.keep_bodies else None
        body_read = False  # a body refused before it was read is not kept, not even empty
        received = 0
        status: int | None = None
        error_answer = bytearray()

        async def observed_receive() -> Message:
            nonlocal body, body_read, received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
            if body is not None and message["type"] == "http.request":
                body.extend(message.get("body", b""))
                body_read = not message.get("more_body", False)
                if len(body) > MAX_KEPT_BODY:
                    body = None
            return message

        async def observed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body" and status is not None and status >= 400:
                room = _ERROR_BODY_BYTES - len(error_answer)
                error_answer.extend(message.get("body", b"")[: max(room, 0)])
            await send(message)

        token = bind(request)
        try:
            await self.app(scope, observed_receive, observed_send)
        except (asyncio.CancelledError, ClientGone):
            status = status or CLIENT_GONE_STATUS
            raise
        except Exception:
            # The server answers 500 (or, mid-stream, cuts the answer short).
            request.error_status = 500
            request.error = request.error or "internal server error; see the Sidelight log"
            status = status or 500
            raise
        finally:
            unbind(token)
            read = body is not None and body_read
            kept = body.decode("utf-8", errors="replace") if read and body is not None else None
            self.monitor.close(request, status or 500, _error_message(bytes(error_answer)), kept)
            if received >= _COLLECT_AFTER_BYTES and (status or 500) >= 400:
                gc.collect()

    def _route(self, scope: Scope) -> str:
        """The route's template (``/v1/models/{model_id:path}``), never the raw path: a
        metric label per distinct path would grow without bound."""
        for route in self.routes:
            match, _ = route.matches(scope)
            if match != Match.NONE:
                return route.path
        return UNMATCHED_ROUTE


def dialect_for_path(path: str) -> str:
    """The dialect a path belongs to (Ollama's ``/`` included); the pipeline confirms it."""
    if path == "/":
        return "ollama"
    return next((name for prefix, name in _DIALECTS if path.startswith(prefix)), "openai")


def _replay(scope: Scope, headers: Headers) -> Replay:
    host = headers.get("host")
    if not host:
        server = scope.get("server") or ("127.0.0.1", 80)
        host = f"{server[0]}:{server[1]}"
    path = scope.get("raw_path", b"").decode("latin-1") or scope["path"]
    query = scope.get("query_string", b"").decode("latin-1")
    url = f"{scope.get('scheme', 'http')}://{host}{path}" + (f"?{query}" if query else "")
    kept = tuple(
        (name, clip(headers[name], HEADER_BYTES)) for name in _REPLAYED_HEADERS if name in headers
    )
    auth = next((name for name in _AUTH_HEADERS if name in headers), None)
    return Replay(scope["method"], clip(url, URL_BYTES), kept, auth)


def _error_message(answer: bytes) -> str | None:
    """The message of an error answer in any dialect's shape (OpenAI, Anthropic, Ollama)."""
    if not answer:
        return None
    try:
        data = json.loads(answer)
    except ValueError:
        return clip(answer.decode("utf-8", errors="replace").strip(), MESSAGE_BYTES) or None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, str):
        return clip(error, MESSAGE_BYTES)
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return clip(str(error["message"]), MESSAGE_BYTES)
    return None
