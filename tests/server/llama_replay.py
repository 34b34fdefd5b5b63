"""llama-server as a remote, recorded once and replayed in CI (tests/server/test_llama_remote.py).

CI cannot build llama.cpp (tens of minutes), so the bytes a real llama-server exchanged with
Sidelight's remote backend are kept in ``tests/fixtures/llama-server/exchanges.json`` and a
tiny loopback server (:class:`ReplayRemote`) stands in for it: each request is answered
with the recorded response to the same method, path and JSON body (a request that was never
recorded is a 500 naming it, so a change in what Sidelight sends fails loudly). Streams are
sent back event by event, as llama-server sent them.

Recording: :class:`RecordingProxy` sits between Sidelight (and the test's direct calls) and
a real llama-server, passes every byte through and writes the exchanges. Re-record with a
llama-server binary (``python -m bench.build_llama_cpp --cache DIR`` builds one from the
llama-cpp-python sdist and prints its path)::

    python -m tests.server.llama_replay --llama-server PATH/llama-server

It serves ``tests/fixtures/sidelight-demo-f16.gguf`` (``--jinja``: the GGUF's own chat
template and tool-call parsing), runs :func:`tests.server.test_llama_remote.drive` through a
first ``sidelight serve`` whose remote ``llama`` is the proxy, and rewrites the fixture.

Threading: each server runs on the engine's :class:`ServerRunner` (uvicorn on a thread);
the recorded list is appended on that thread's loop and read after it stopped.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from engine.server.runner import ServerRunner
from tests.server.harness import free_port
from tests.waiting import wait_until

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "llama-server" / "exchanges.json"
GGUF = ROOT / "tests" / "fixtures" / "sidelight-demo-f16.gguf"
ALIAS = "sidelight-demo"  # the id llama-server lists (--alias), as a user would name it
SDIST = "llama-cpp-python 0.3.36"  # whose vendored llama.cpp the fixture was recorded with


@dataclass(frozen=True)
class Exchange:
    """One request and llama-server's whole answer (a stream's body holds its events)."""

    method: str
    path: str
    request: Any  # the JSON body, or None for a GET
    status: int
    content_type: str
    body: str

    @property
    def key(self) -> str:
        return request_key(self.method, self.path, self.request)

    def events(self) -> Iterator[str]:
        """The body as llama-server sent it: one SSE event (``\\n\\n`` kept) at a time."""
        rest = self.body
        while rest:
            head, sep, rest = rest.partition("\n\n")
            yield head + sep


def request_key(method: str, path: str, body: Any) -> str:
    return f"{method} {path} {json.dumps(body, sort_keys=True, separators=(',', ':'))}"


def load_exchanges(path: Path = FIXTURE) -> tuple[dict[str, Any], list[Exchange]]:
    """The fixture's ``recorded_with`` facts and its exchanges."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return data["recorded_with"], [Exchange(**item) for item in data["exchanges"]]


async def _json_or_none(request: Request) -> Any:
    raw = await request.body()
    return json.loads(raw) if raw else None


class ReplayRemote:
    """A loopback server answering with the recorded exchanges (see the module docstring)."""

    def __init__(self, exchanges: list[Exchange]) -> None:
        self.exchanges = {e.key: e for e in exchanges}
        self.unmatched: list[str] = []  # requests that were never recorded
        methods = ["GET", "POST"]
        app = Starlette(routes=[Route("/{path:path}", self._answer, methods=methods)])
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._runner = ServerRunner(app, "127.0.0.1", self.port)

    def __enter__(self) -> ReplayRemote:
        self._runner.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._runner.stop()

    async def _answer(self, request: Request) -> Response:
        key = request_key(request.method, request.url.path, await _json_or_none(request))
        exchange = self.exchanges.get(key)
        if exchange is None:
            self.unmatched.append(key)
            message = f"not recorded (re-record tests/fixtures/llama-server): {key[:2000]}"
            return JSONResponse({"error": {"code": 500, "message": message}}, status_code=500)
        if exchange.content_type.startswith("text/event-stream"):

            async def events() -> AsyncIterator[str]:
                for event in exchange.events():
                    yield event

            return StreamingResponse(
                events(), status_code=exchange.status, media_type=exchange.content_type
            )
        return Response(exchange.body, exchange.status, media_type=exchange.content_type)


class RecordingProxy:
    """Passes every request through to ``upstream`` (a real llama-server) and keeps each
    exchange once (the catalog's repeated ``GET /v1/models`` is kept the first time)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.recorded: dict[str, Exchange] = {}
        self.every: list[Exchange] = []  # every exchange, in order (repeats too)
        methods = ["GET", "POST"]
        app = Starlette(routes=[Route("/{path:path}", self._forward, methods=methods)])
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._runner = ServerRunner(app, "127.0.0.1", self.port)

    def __enter__(self) -> RecordingProxy:
        self._runner.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._runner.stop()

    async def _forward(self, request: Request) -> Response:
        body = await _json_or_none(request)
        path = request.url.path
        http = httpx.AsyncClient(base_url=self.upstream, timeout=300, trust_env=False)
        sent = http.build_request(request.method, path, json=body)
        upstream = await http.send(sent, stream=True)
        content_type = upstream.headers.get("content-type", "application/json")
        kept: list[bytes] = []

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for piece in upstream.aiter_raw():
                    kept.append(piece)
                    yield piece
            finally:
                await upstream.aclose()
                await http.aclose()
                exchange = Exchange(
                    request.method, path, body, upstream.status_code, content_type,
                    b"".join(kept).decode("utf-8"),
                )  # fmt: skip
                self.every.append(exchange)
                self.recorded.setdefault(exchange.key, exchange)

        return StreamingResponse(relay(), upstream.status_code, media_type=content_type)


def llama_version(binary: Path) -> str:
    """``llama-server --version``'s first line (``version: 1 (abc123)``)."""
    done = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    lines = (done.stdout + done.stderr).strip().splitlines()
    return next((line for line in lines if line.startswith("version")), lines[0] if lines else "?")


def llama_command(binary: Path, port: int) -> list[str]:
    """How the recording (and the live test) runs llama-server: the demo GGUF, greedy-ready,
    tools parsed from its chat template (``--jinja``), one slot, loopback."""
    return [
        str(binary), "-m", str(GGUF), "--alias", ALIAS, "--jinja",
        "--host", "127.0.0.1", "--port", str(port),
        "-c", "2048", "-np", "1", "-t", "1", "--no-webui",
    ]  # fmt: skip


@contextmanager
def running_llama_server(binary: Path, log: Path) -> Iterator[str]:
    """A real llama-server on a free loopback port, its output in ``log``; yields its URL
    once ``/health`` is 200; terminated (killed after 15 s) on exit."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(llama_command(binary, port), stdout=out, stderr=subprocess.STDOUT)
        try:

            def healthy() -> bool:
                if proc.poll() is not None:
                    raise RuntimeError(f"llama-server exited: {log.read_text(errors='replace')}")
                try:
                    return httpx.get(f"{url}/health", timeout=2).status_code == 200
                except httpx.HTTPError:
                    return False

            wait_until(healthy, "llama-server healthy", 120, interval=0.2)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def write_fixture(exchanges: list[Exchange], facts: dict[str, Any], path: Path = FIXTURE) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "recorded_with": facts,
        "exchanges": [e.__dict__ for e in sorted(exchanges, key=lambda e: e.key)],
    }
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def main() -> None:
    from tests.server.test_llama_remote import drive, first_server

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-server", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/sidelight-llama-record"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    args.work.mkdir(parents=True, exist_ok=True)
    with (
        running_llama_server(args.llama_server, args.work / "llama-server.log") as upstream,
        RecordingProxy(upstream) as proxy,
        first_server(args.work / "first", proxy.url) as first,
    ):
        drive(first.base_url, proxy.url)
    facts = {
        "llama_server": llama_version(args.llama_server),
        "source": SDIST,
        "command": [
            Path(a).name if "/" in a else a for a in llama_command(Path("llama-server"), 0)
        ],
        "model": str(GGUF.relative_to(ROOT)),
    }
    write_fixture(list(proxy.recorded.values()), facts)
    logger.info("wrote %d exchanges to %s", len(proxy.recorded), FIXTURE)


if __name__ == "__main__":
    main()
