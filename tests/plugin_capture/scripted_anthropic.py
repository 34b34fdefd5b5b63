"""A scripted Anthropic Messages server that records every request, for capturing what an
agent sends on turns a tiny model cannot bring about (see
``tests/fixtures/plugin_requests/README.md``).

Its first answer to a request that offers ``ToolSearch`` is a ToolSearch call loading
``WebFetch``; every other answer is the text "Done.". Streamed as Anthropic streams; each
request is one JSON line in the log file (path with query, headers, body as text).

Usage: python -m tests.plugin_capture.scripted_anthropic PORT LOG_FILE
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

SEARCH = {"query": "select:WebFetch", "max_results": 1}


def _sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def _answer(body: dict[str, Any], number: int) -> Iterator[str]:
    last = body["messages"][-1]["content"]
    answered = isinstance(last, list) and any(c.get("type") == "tool_result" for c in last)
    searches = any(t.get("name") == "ToolSearch" for t in body.get("tools", []))
    usage = {"input_tokens": 10, "output_tokens": 1}
    message = {
        "id": f"msg_{number}",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    yield _sse("message_start", {"type": "message_start", "message": message})
    if searches and not answered:
        block: dict[str, Any] = {"type": "tool_use", "id": f"toolu_{number}", "name": "ToolSearch"}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(SEARCH)}
        reason = "tool_use"
    else:
        block, delta, reason = {"type": "text", "text": ""}, {"type": "text_delta"}, "end_turn"
        delta["text"] = "Done."
    if block["type"] == "tool_use":
        block["input"] = {}
    yield _sse(
        "content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}
    )
    yield _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
    yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
    end = {"stop_reason": reason, "stop_sequence": None}
    yield _sse("message_delta", {"type": "message_delta", "delta": end, "usage": usage})
    yield _sse("message_stop", {"type": "message_stop"})


def build_app(log_file: Path) -> Starlette:
    count = [0]

    def record(request: Request, body: bytes) -> None:
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        line = {
            "method": request.method,
            "path": path,
            "headers": [[k, v] for k, v in request.headers.items()],
            "body": body.decode("utf-8") if body else None,
        }
        with log_file.open("a", encoding="utf-8") as log:
            log.write(json.dumps(line, ensure_ascii=False) + "\n")

    async def messages(request: Request) -> Response:
        raw = await request.body()
        record(request, raw)
        body = json.loads(raw)
        count[0] += 1
        if body.get("stream"):
            return StreamingResponse(_answer(body, count[0]), media_type="text/event-stream")
        text = {"type": "text", "text": "Done."}
        return JSONResponse(
            {
                "id": f"msg_{count[0]}",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [text],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 1},
            }
        )

    async def other(request: Request) -> Response:
        record(request, await request.body())
        return Response(status_code=404)

    return Starlette(
        routes=[
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/{path:path}", other, methods=["GET", "HEAD", "POST"]),
        ]
    )


def main() -> None:
    port, log_file = int(sys.argv[1]), Path(sys.argv[2])
    uvicorn.run(build_app(log_file), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
