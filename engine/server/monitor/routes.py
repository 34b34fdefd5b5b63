"""``GET /metrics`` (Prometheus) and ``GET /api/sidelight/requests`` (the request log).

Both follow the API's rules (open on loopback without a key, behind the key when one is
set); the request log also answers only clients on this machine, since it shows what
every client sent. Register these before the Ollama routes, whose last route catches every
other ``/api`` path.
"""

from __future__ import annotations

import ipaddress

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from engine.echo import clip
from engine.server.errors import APIError
from engine.server.monitor.curl import curl_command
from engine.server.monitor.monitor import RequestMonitor

REQUESTS_PATH = "/api/sidelight/requests"


def monitor_routes(monitor: RequestMonitor) -> list[Route]:
    async def metrics(request: Request) -> Response:
        return Response(monitor.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    async def requests(request: Request) -> Response:
        if not _from_this_machine(request):
            raise APIError(403, "the request log is only available on this machine")
        since = _since(request.query_params.get("since", "0"))
        log = monitor.log
        last_id = log.last_id  # read first: an entry added meanwhile is in the next poll
        finished = [e for e in log.entries(since) if e.id <= last_id]
        return JSONResponse(
            {
                "object": "list",
                "last_id": last_id,
                "keep_bodies": monitor.keep_bodies,
                "data": [e.to_dict(curl_command(e)) for e in finished],
                "running": [e.to_dict() for e in log.running()],
            }
        )

    return [
        Route("/metrics", metrics, methods=["GET"]),
        Route(REQUESTS_PATH, requests, methods=["GET"]),
    ]


def _since(text: str) -> int:
    # ASCII digits only: str.isdigit() also takes "٣" (read as 3) and "²" (int() refuses it).
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise APIError(
            400,
            f"since: expected the id of the last request seen (0 or more), got {clip(repr(text))}",
            param="since",
            code="invalid_value",
        )
    return int(text)


def _from_this_machine(request: Request) -> bool:
    if request.client is None:
        return False
    try:
        return ipaddress.ip_address(request.client.host).is_loopback
    except ValueError:
        return False
