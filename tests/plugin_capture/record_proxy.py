"""A loopback recording proxy: forwards every request to a Sidelight server, logs it verbatim.

Used to capture the exact HTTP requests a real IDE-plugin client sends (see
``tests/fixtures/plugin_requests/README.md``). Each request becomes one JSON line in the log
file: method, path with query, headers in arrival order, the body as text, and the upstream
status. Responses, streamed or not, are passed through unchanged.

Usage: python -m tests.plugin_capture.record_proxy UPSTREAM_URL PORT LOG_FILE
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "content-length"}


def build_app(upstream: str, log_file: Path) -> Starlette:
    client = httpx.AsyncClient(base_url=upstream, timeout=300)

    async def forward(request: Request) -> StreamingResponse:
        body = await request.body()
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        sent = {k: v for k, v in headers if k.lower() not in HOP_BY_HOP | {"host"}}
        upstream_request = client.build_request(request.method, path, headers=sent, content=body)
        response = await client.send(upstream_request, stream=True)
        record = {
            "method": request.method,
            "path": path,
            "headers": headers,
            "body": body.decode("utf-8"),
            "status": response.status_code,
        }
        with log_file.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")

        async def relay() -> AsyncIterator[bytes]:
            async for chunk in response.aiter_raw():
                yield chunk

        kept = {k: v for k, v in response.headers.items() if k.lower() not in HOP_BY_HOP}
        return StreamingResponse(
            relay(),
            status_code=response.status_code,
            headers=kept,
            background=BackgroundTask(response.aclose),
        )

    methods = ["GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH"]
    return Starlette(routes=[Route("/{path:path}", forward, methods=methods)])


def main() -> None:
    upstream, port, log_file = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    uvicorn.run(build_app(upstream, log_file), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
