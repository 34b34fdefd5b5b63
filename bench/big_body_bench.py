"""What one huge request does to everyone else: ``/health`` latency and a stream's gaps.

Against a running ``sidelight serve`` (the demo model is enough), one client polls
``/health`` every 50 ms and another streams a long chat reply, while a third sends the
biggest body the server reads (15 MB of text in one message) to a route: Anthropic's
``count_tokens`` (the worker would template and tokenize it all), ``/v1/messages`` and
OpenAI chat. Printed per route: the big request's status and seconds, the ``/health``
median and worst latency during it as ratios of the idle ones, and the stream's longest
gap as a ratio of its median gap. ``--load N`` runs N busy loops beside it (a laptop
compiling or indexing).

Run: ``sidelight serve --port 11781`` then ``python -m bench.big_body_bench --url
http://127.0.0.1:11781 [--load 6]``. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import time
from typing import Any

import httpx

ROUTES = ("/v1/messages/count_tokens", "/v1/messages", "/v1/chat/completions")


async def _health(
    client: httpx.AsyncClient, url: str, stop: asyncio.Event, out: list[float]
) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        await client.get(f"{url}/health")
        out.append(time.perf_counter() - started)
        await asyncio.sleep(0.05)


async def _stream(
    client: httpx.AsyncClient, url: str, stop: asyncio.Event, gaps: list[float]
) -> None:
    body = {
        "model": "sidelight-demo",
        "messages": [{"role": "user", "content": "Hello"}],
        "stream": True,
        "max_tokens": 1900,
        "temperature": 1.0,
        "frequency_penalty": 0.5,
    }
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as reply:
        last = time.perf_counter()
        async for line in reply.aiter_lines():
            now = time.perf_counter()
            if line.startswith("data:"):
                gaps.append(now - last)
                last = now
            if stop.is_set():
                return


async def _one(client: httpx.AsyncClient, url: str, route: str, megabytes: int) -> dict[str, Any]:
    stop = asyncio.Event()
    idle: list[float] = []
    health = asyncio.create_task(_health(client, url, stop, idle))
    await asyncio.sleep(1.0)
    during: list[float] = []
    idle_copy, idle[:] = list(idle), []
    gaps: list[float] = []
    stream = asyncio.create_task(_stream(client, url, stop, gaps))
    await asyncio.sleep(0.5)
    text = "word " * (megabytes * 1024 * 1024 // 5)
    body = {
        "model": "sidelight-demo",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": text}],
    }
    started = time.perf_counter()
    reply = await client.post(
        f"{url}{route}", json=body, headers={"anthropic-version": "2023-06-01"}
    )
    seconds = time.perf_counter() - started
    during = list(idle)
    stop.set()
    await health
    stream.cancel()
    return {
        "route": route,
        "status": reply.status_code,
        "seconds": round(seconds, 2),
        "health_median_ratio": round(statistics.median(during) / statistics.median(idle_copy), 2),
        "health_worst_ratio": round(max(during) / max(idle_copy), 2),
        "stream_worst_gap_ratio": round(max(gaps) / statistics.median(gaps), 1) if gaps else None,
    }


def _spin() -> None:
    while True:
        pass


async def _main(url: str, megabytes: int) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(timeout=600) as client:
        return [await _one(client, url, route, megabytes) for route in ROUTES]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:11781")
    parser.add_argument("--megabytes", type=int, default=15)
    parser.add_argument("--load", type=int, default=0, help="busy loops beside the server")
    args = parser.parse_args()
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.load)]
    for spinner in spinners:
        spinner.start()
    try:
        results = asyncio.run(_main(args.url, args.megabytes))
    finally:
        for spinner in spinners:
            spinner.terminate()
    print(json.dumps({"load": args.load, "megabytes": args.megabytes, "routes": results}, indent=2))


if __name__ == "__main__":
    main()
