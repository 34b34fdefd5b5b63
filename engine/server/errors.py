"""One error shape for every failure: ``{"error": {"message", "type", "param", "code"}}``.

Routes raise :class:`APIError`; the app's exception handlers turn it (and anything
unexpected) into that body. No traceback ever leaves the server: unexpected errors are
logged in full and answered with a short message.

APIs whose clients expect another shape (Anthropic's ``/v1/messages``, LM Studio's
``/api/v1``, Ollama's ``/api``) declare an :class:`ErrorShape` next to their routes; the app
keeps them in an :class:`ErrorShapes` registry on ``app.state.error_shapes``, which the
exception handlers and the middleware refusals (:func:`refusal`) read, so an error answers in
the shape of the API its path belongs to, whoever raises it. This module knows no dialect.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Scope

from engine.echo import MESSAGE_BYTES, clip, clip_optional

logger = logging.getLogger(__name__)

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    501: "not_implemented_error",
    503: "service_unavailable_error",
}


class APIError(Exception):
    """An error the client should see, with its HTTP status.

    ``message`` and ``param`` may repeat what the client sent: both are clipped
    (:func:`engine.echo.clip`), so no error answer or log entry grows with a request.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        message = clip(message, MESSAGE_BYTES)
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = clip_optional(param)
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.message, param=self.param, code=self.code)


def error_body(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """OpenAI's error body: the shape of every path no :class:`ErrorShape` claims."""
    return {
        "error": {
            "message": message,
            "type": _TYPES.get(status, "invalid_request_error" if status < 500 else "server_error"),
            "param": param,
            "code": code,
        }
    }


def error_response(
    status: int,
    message: str,
    *,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(
        error_body(status, message, param=param, code=code), status_code=status, headers=headers
    )


# ---- error shapes per API ----------------------------------------------------------------


class ErrorRenderer(Protocol):
    """An API's error body for a status and message (``param`` and ``code`` when it has them)."""

    def __call__(
        self, status: int, message: str, *, param: str | None, code: str | None
    ) -> dict[str, Any]: ...


# Which errors a shape answers: all of them, or only the middleware's refusals before routing
# (for an API whose routes answer their own errors, so the app's handlers keep OpenAI's shape).
ErrorCoverage = Literal["every_error", "refusals"]


@dataclass(frozen=True)
class ErrorShape:
    """The error shape of one API's paths, declared by the API next to its routes.

    Each of ``paths`` is an exact path (``"/v1/messages"``) or a prefix ending in ``/*``
    (``"/v1/messages/*"``: every path below ``/v1/messages/``). The most specific pattern
    matching a path wins: the longest, an exact path over a prefix of the same length.
    """

    paths: tuple[str, ...]
    render: ErrorRenderer
    covers: ErrorCoverage = "every_error"

    def __post_init__(self) -> None:
        for pattern in self.paths:
            if not pattern.startswith("/") or "*" in pattern.removesuffix("/*"):
                raise ValueError(f"{pattern!r}: an exact path or a prefix ending in '/*'")


def _specificity(pattern: str, path: str) -> tuple[int, bool] | None:
    """How specifically ``pattern`` matches ``path`` (bigger wins), or None when it does not."""
    if pattern.endswith("/*"):
        prefix = pattern[:-1]
        return (len(prefix), False) if path.startswith(prefix) else None
    return (len(pattern), True) if path == pattern else None


class ErrorShapes:
    """The registry of error shapes, path pattern -> renderer; OpenAI's shape by default.

    Built once with the app (``app.state.error_shapes``) and never changed after, so the
    event loop's handlers and middleware read it without locks.
    """

    def __init__(self, shapes: Iterable[ErrorShape] = ()) -> None:
        self._shapes = tuple(shapes)
        seen: set[str] = set()
        for shape in self._shapes:
            for pattern in shape.paths:
                if pattern in seen:
                    raise ValueError(f"two error shapes claim {pattern!r}")
                seen.add(pattern)

    def renderer(self, path: str, *, refusal: bool = False) -> ErrorRenderer:
        """The renderer for an error on ``path``; ``refusal`` for a middleware's refusal."""
        best: tuple[int, bool] | None = None
        render: ErrorRenderer = error_body
        for shape in self._shapes:
            if shape.covers == "refusals" and not refusal:
                continue
            for pattern in shape.paths:
                score = _specificity(pattern, path)
                if score is not None and (best is None or score > best):
                    best, render = score, shape.render
        return render

    def response(
        self,
        path: str,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        refusal: bool = False,
    ) -> JSONResponse:
        """An error answer for ``path`` in the shape of the API it belongs to (its message
        and param clipped: they may repeat what the client sent)."""
        render = self.renderer(path, refusal=refusal)
        body = render(status, clip(message, MESSAGE_BYTES), param=clip_optional(param), code=code)
        return JSONResponse(body, status_code=status, headers=headers)


def error_shapes(app: object) -> ErrorShapes:
    """The app's registry (``app.state.error_shapes``); without one, OpenAI's shape for all."""
    shapes = getattr(getattr(app, "state", None), "error_shapes", None)
    return shapes if isinstance(shapes, ErrorShapes) else ErrorShapes()


def refusal(
    scope: Scope, status: int, message: str, *, code: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    """A middleware's refusal, in the error shape of the API the path belongs to.

    The registry comes from the app Starlette puts in the scope before any middleware runs.
    """
    path = str(scope.get("path", ""))
    shapes = error_shapes(scope.get("app"))
    return shapes.response(path, status, message, code=code, headers=headers, refusal=True)


# ---- the app's exception handlers --------------------------------------------------------


async def handle_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    return error_shapes(request.app).response(
        request.url.path,
        exc.status,
        exc.message,
        param=exc.param,
        code=exc.code,
        headers=exc.headers,
    )


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    status = int(getattr(exc, "status_code", 500))
    detail = str(getattr(exc, "detail", "")) or "error"
    if status == 404:
        detail = f"no route for {request.method} {request.url.path}"
    elif status == 405:
        detail = f"method {request.method} is not allowed on {request.url.path}"
    shapes = error_shapes(request.app)
    return shapes.response(request.url.path, status, detail, headers=getattr(exc, "headers", None))


async def handle_disconnect(request: Request, exc: Exception) -> Response:
    """A client that hung up before its body arrived: routine, not a server error.

    Nobody reads the answer; returning one keeps the exception from reaching the server's
    last-resort handler, which would log it as a crash.
    """
    logger.info("client went away during %s %s", request.method, request.url.path)
    return Response(status_code=499)


async def handle_unexpected(request: Request, exc: Exception) -> Response:
    logger.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_shapes(request.app).response(
        request.url.path,
        500,
        "internal server error; see the Sidelight log for details",
        code="internal_error",
    )
