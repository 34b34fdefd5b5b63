"""One error shape for every failure: ``{"error": {"message", "type", "param", "code"}}``.

Routes raise :class:`APIError`; the app's exception handlers turn it (and anything
unexpected) into that body. No traceback ever leaves the server: unexpected errors are
logged in full and answered with a short message. Paths of Anthropic's Messages API
(``/v1/messages...``) and of LM Studio's REST API v1 (``/api/v1/...``) answer in their own
shapes instead, whoever refuses the request.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Scope

from engine.server.anthropic.protocol import error_body as anthropic_error_body
from engine.server.lmstudio_v1.protocol import error_body as lmstudio_v1_error_body

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
    """An error the client should see, with its HTTP status."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.message, param=self.param, code=self.code)


def error_body(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
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


def _is_anthropic_path(path: str) -> bool:
    return path == "/v1/messages" or path.startswith("/v1/messages/")


def _is_lmstudio_v1_path(path: str) -> bool:
    return path.startswith("/api/v1/")


def _response(
    path: str,
    status: int,
    message: str,
    *,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    if _is_anthropic_path(path):
        body = anthropic_error_body(status, message)
        return JSONResponse(body, status_code=status, headers=headers)
    if _is_lmstudio_v1_path(path):
        body = lmstudio_v1_error_body(status, message, param=param, code=code)
        return JSONResponse(body, status_code=status, headers=headers)
    return error_response(status, message, param=param, code=code, headers=headers)


def refusal(
    scope: Scope, status: int, message: str, *, code: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    """A middleware's refusal, in the error shape of the API the path belongs to.

    Ollama's and LM Studio v0's clients (paths under ``/api``, and Ollama's ``/``) show
    ``{"error": "..."}`` as is; Anthropic's and LM Studio v1's paths get their shapes;
    everything else OpenAI's.
    """
    path = str(scope.get("path", ""))
    if path in {"/", "/api"} or (path.startswith("/api/") and not _is_lmstudio_v1_path(path)):
        return JSONResponse({"error": message}, status_code=status, headers=headers)
    return _response(path, status, message, code=code, headers=headers)


async def handle_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    path = request.url.path
    return _response(
        path, exc.status, exc.message, param=exc.param, code=exc.code, headers=exc.headers
    )


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    status = int(getattr(exc, "status_code", 500))
    detail = str(getattr(exc, "detail", "")) or "error"
    if status == 404:
        detail = f"no route for {request.method} {request.url.path}"
    elif status == 405:
        detail = f"method {request.method} is not allowed on {request.url.path}"
    return _response(request.url.path, status, detail, headers=getattr(exc, "headers", None))


async def handle_disconnect(request: Request, exc: Exception) -> Response:
    """A client that hung up before its body arrived: routine, not a server error.

    Nobody reads the answer; returning one keeps the exception from reaching the server's
    last-resort handler, which would log it as a crash.
    """
    logger.info("client went away during %s %s", request.method, request.url.path)
    return Response(status_code=499)


async def handle_unexpected(request: Request, exc: Exception) -> Response:
    logger.exception("unhandled error on %s %s", request.method, request.url.path)
    return _response(
        request.url.path,
        500,
        "internal server error; see the Sidelight log for details",
        code="internal_error",
    )
