"""Served vs raw: what Sidelight's server costs on top of OpenVINO GenAI, and llama.cpp beside it.

Why: the engine runs in a worker process behind IPC, an asyncio server and SSE. These
figures show what that costs a streaming client compared with driving GenAI directly in
one process, and where we stand against llama.cpp on the very same GGUF file.

How (one run, everything interleaved so machine noise hits both sides alike):

1. ``sidelight serve`` on the bench model's int4 IR (once with the default stream interval,
   once sending every token alone); the raw ``ContinuousBatchingPipeline`` with the
   engine's own settings loaded in this process. Alternating repetitions of one
   streamed chat request (same templated prompt length, ``ignore_eos``, greedy), then of
   four concurrent requests; then four more while a thread polls ``/health`` every 10 ms
   (a separate run, since the probes cost CPU too).
2. ``sidelight serve`` on the Q4_0 GGUF and ``llama-server`` on the same file, alternating
   the same single and four-stream workloads.

Served timings are taken where an ``openai``-style client sees them: TTFT is the first
content chunk, decode tokens/s is (completion tokens - 1) / (last chunk - first chunk).
Prompts carry a unique salt per request so prefix caching never makes one look free.

Run from the repository root with the runtime venv, after ``bench.build_llama_cpp`` and
``bench.build_bench_model``::

    .venv/bin/python -m bench.serve_bench [--reps 5] [--new-tokens 128] [--prompt-tokens 100]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import httpx

from bench.common import CacheLayout, add_common_args, median, setup_logging, sse_chunks
from bench.timing import RunResult, TokenTracker
from tests.server.harness import ServerProcess

T = TypeVar("T")
logger = logging.getLogger(__name__)

FILLER = (
    "Summarise these notes about a small software project in three bullet points and list "
    "open questions. The team moved the build to one script, replaced a hand-written parser "
    "with a generated one, measured start-up time on three laptops and found that loading "
    "the model from disk was the slowest step. "
)


# --- prompts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prompt:
    messages: list[dict[str, str]]
    ids: list[int]


def make_prompt(tokenizer: Any, n_tokens: int, salt: str) -> Prompt:
    """A chat prompt whose templated form has about ``n_tokens`` tokens."""
    words = (FILLER * 20).split()
    lo, hi = 1, len(words)
    best: Prompt | None = None
    while lo <= hi:  # binary search on the number of filler words
        mid = (lo + hi) // 2
        messages = [{"role": "user", "content": f"[{salt}] " + " ".join(words[:mid])}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        ids = [int(i) for i in tokenizer.encode(text, add_special_tokens=False).input_ids.data[0]]
        if len(ids) <= n_tokens:
            best, lo = Prompt(messages, ids), mid + 1
        else:
            hi = mid - 1
    assert best is not None
    return best


# --- the served side -----------------------------------------------------------------------


@contextmanager
def sidelight_server(model: Path, home: Path, interval_ms: int | None = None) -> Iterator[str]:
    """``sidelight serve`` on a free port; yields its base URL once the model is ready.

    ``interval_ms`` is the stream interval (``None``: Sidelight's default).
    """
    from engine.settings import DEFAULT_STREAM_INTERVAL_MS

    interval = DEFAULT_STREAM_INTERVAL_MS if interval_ms is None else interval_ms
    proc = ServerProcess(home, model, env={"SIDELIGHT_STREAM_INTERVAL_MS": str(interval)})
    try:
        proc.wait_ready(timeout=600)
        yield proc.base_url
    finally:
        proc.stop()


def served_model_id(url: str) -> str:
    return str(httpx.get(f"{url}/health").json()["model"])


def _stream_chat(
    client: httpx.Client, url: str, model: str, prompt: Prompt, new_tokens: int,
    tracker: TokenTracker,
) -> None:  # fmt: skip
    body = {
        "model": model, "messages": prompt.messages, "max_tokens": new_tokens,
        "temperature": 0, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True},
    }  # fmt: skip
    first = last = None
    completion = 0
    with client.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=600) as resp:
        resp.raise_for_status()
        for chunk in sse_chunks(resp):
            if chunk.get("usage"):
                completion = chunk["usage"]["completion_tokens"]
            if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                now = time.perf_counter()
                first = first or now
                last = now
    if first is None or last is None:
        raise RuntimeError("the served stream had no content")
    # Tokens arrive one per chunk except where a multi-byte character waits for its rest;
    # count them all at the right ends so decode speed uses the true token count.
    tracker.add(first, 1)
    tracker.add(last, completion - 1)


def measure_served(url: str, model: str, prompts: Sequence[Prompt], new_tokens: int) -> RunResult:
    """All prompts at once, one streaming client thread each."""
    clients = [httpx.Client() for _ in prompts]  # built before the clock starts
    start = time.perf_counter()
    trackers = [TokenTracker(len(p.ids), start) for p in prompts]
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            _stream_chat(clients[i], url, model, prompts[i], new_tokens, trackers[i])
        except BaseException as exc:
            errors.append(exc)
        finally:
            clients[i].close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return RunResult.from_trackers(trackers)


class HealthProbe:
    """Polls ``/health`` every ``interval`` seconds on its own thread; records latencies."""

    def __init__(self, url: str, interval: float = 0.01) -> None:
        self._url, self._interval = url, interval
        self.latencies_ms: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with httpx.Client() as client:
            while not self._stop.is_set():
                start = time.perf_counter()
                client.get(f"{self._url}/health", timeout=5)
                self.latencies_ms.append((time.perf_counter() - start) * 1000)
                self._stop.wait(self._interval)


def rotate(items: list[T], by: int) -> list[T]:
    by %= len(items)
    return items[by:] + items[:by]


def percentile(values: Sequence[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


# --- the runs ------------------------------------------------------------------------------


@dataclass
class Series:
    """Repetitions of one configuration."""

    name: str
    runs: list[RunResult]

    def ttft_ms(self) -> float:
        return median([r.requests[0].ttft_ms for r in self.runs])

    def decode_tps(self) -> float:
        return median([median([q.decode_tps for q in r.requests]) for r in self.runs])

    def aggregate_tps(self) -> float:
        return median([r.aggregate_tps for r in self.runs])


def bench_ir(layout: CacheLayout, args: argparse.Namespace, home: Path) -> dict[str, Any]:
    """Served vs raw on the int4 IR, 1 and 4 streams, /health latency under load."""
    import openvino_genai as ov_genai

    from bench.genai_measure import load_cb_pipeline, measure_cb, scheduler_config
    from engine.settings import load_settings

    settings = load_settings({"SIDELIGHT_HOME": str(home)})
    raw, load_s = load_cb_pipeline(
        layout.ov_dir, scheduler_config(cache_size_gb=max(1, round(settings.kv_cache_gb))),
        settings.cpu.properties(),
    )  # fmt: skip
    logger.info("raw pipeline loaded in %.1fs", load_s)
    tokenizer: Any = raw.get_tokenizer()
    assert isinstance(tokenizer, ov_genai.Tokenizer)
    keys = ("raw-1", "served-1", "served-1-every-token", "raw-4", "served-4", "served-4-probed")
    series = {k: Series(k, []) for k in keys}
    health: list[float] = []
    rid = 0
    with (
        sidelight_server(layout.ov_dir, home) as url,
        sidelight_server(layout.ov_dir, home / "every-token", interval_ms=0) as every_url,
    ):
        model = served_model_id(url)
        for rep in range(args.reps + 1):  # rep 0 warms both sides up and is dropped
            one = [make_prompt(tokenizer, args.prompt_tokens, f"ir1-{rep}-{s}") for s in "abc"]
            four = [make_prompt(tokenizer, args.prompt_tokens, f"ir4-{rep}-{i}") for i in range(12)]
            n = args.new_tokens
            singles: list[tuple[str, Callable[[], RunResult]]] = [
                ("raw-1", partial(measure_cb, raw, [one[0].ids], n, rid)),
                ("served-1", partial(measure_served, url, model, [one[1]], n)),
                ("served-1-every-token", partial(measure_served, every_url, model, [one[2]], n)),
            ]
            fours: list[tuple[str, Callable[[], RunResult]]] = [
                ("raw-4", partial(measure_cb, raw, [p.ids for p in four[:4]], n, rid + 1)),
                ("served-4", partial(measure_served, url, model, four[4:8], n)),
            ]
            # Each repetition starts with the next case, so no case always runs first.
            results = {key: run() for key, run in rotate(singles, rep) + rotate(fours, rep)}
            rid += 5
            # /health latency under load, in its own run: 100 probes a second cost CPU too.
            with HealthProbe(url) as probe:
                results["served-4-probed"] = measure_served(url, model, four[8:], args.new_tokens)
            if rep:
                health.extend(probe.latencies_ms)
                for key, result in results.items():
                    series[key].runs.append(result)
            logger.info(
                "IR rep %d: %s", rep, {k: round(v.aggregate_tps, 1) for k, v in results.items()}
            )
    del raw
    return {
        "series": series,
        "health_p50_ms": percentile(health, 50),
        "health_p99_ms": percentile(health, 99),
        "health_samples": len(health),
    }


def bench_gguf(layout: CacheLayout, args: argparse.Namespace, home: Path) -> dict[str, Any]:
    """Sidelight serving the Q4_0 GGUF vs llama-server on the same file, 1 and 4 streams."""
    import openvino_genai as ov_genai

    from bench.llama_cpp import llama_server, measure_server

    tokenizer = ov_genai.Tokenizer(str(layout.ov_dir))  # same vocabulary and template
    series = {k: Series(k, []) for k in ("sidelight-1", "llama-1", "sidelight-4", "llama-4")}
    ctx = args.prompt_tokens + args.new_tokens + 64
    with (
        sidelight_server(layout.gguf_q4_0, home) as url,
        llama_server(layout.llama_binary("llama-server"), layout.gguf_q4_0,
                     threads=os.cpu_count() or 2, parallel=4, ctx_per_slot=ctx) as llama,
    ):  # fmt: skip
        model = served_model_id(url)
        for rep in range(args.reps + 1):
            p = [make_prompt(tokenizer, args.prompt_tokens, f"gg-{rep}-{i}") for i in range(10)]
            results = {
                "sidelight-1": measure_served(url, model, [p[0]], args.new_tokens),
                "llama-1": measure_server(llama, [p[1].ids], args.new_tokens),
                "sidelight-4": measure_served(url, model, p[2:6], args.new_tokens),
                "llama-4": measure_server(llama, [q.ids for q in p[6:10]], args.new_tokens),
            }
            if rep:
                for key, result in results.items():
                    series[key].runs.append(result)
            logger.info(
                "GGUF rep %d: %s", rep, {k: round(v.aggregate_tps, 1) for k, v in results.items()}
            )
    return {"series": series}


def report(ir: dict[str, Any], gguf: dict[str, Any] | None, args: argparse.Namespace) -> str:
    s = ir["series"]
    lines = [
        f"workload: {args.prompt_tokens}-token chat prompt, {args.new_tokens} new tokens, "
        f"greedy, ignore_eos; medians of {args.reps} repetitions after one warm-up",
        "",
        "| int4 IR | TTFT ms | decode tok/s | aggregate tok/s |",
        "| --- | --- | --- | --- |",
    ]
    for key in s:  # in measuring order
        v = s[key]
        lines.append(
            f"| {key} | {v.ttft_ms():.1f} | {v.decode_tps():.2f} | {v.aggregate_tps():.2f} |"
        )
    lines += [
        "",
        f"- served / raw decode (1 stream): {s['served-1'].decode_tps() / s['raw-1'].decode_tps():.3f}",
        f"- the same with every token its own chunk (SIDELIGHT_STREAM_INTERVAL_MS=0): "
        f"{s['served-1-every-token'].decode_tps() / s['raw-1'].decode_tps():.3f}",
        f"- TTFT overhead (1 stream): {s['served-1'].ttft_ms() - s['raw-1'].ttft_ms():+.1f} ms",
        f"- served 4 streams / 1 stream aggregate: "
        f"{s['served-4'].aggregate_tps() / s['served-1'].aggregate_tps():.2f}x "
        f"(raw: {s['raw-4'].aggregate_tps() / s['raw-1'].aggregate_tps():.2f}x)",
        f"- /health while 4 other streams generate (a separate run, polled every 10 ms): p50 {ir['health_p50_ms']:.1f} ms, "
        f"p99 {ir['health_p99_ms']:.1f} ms ({ir['health_samples']} probes)",
    ]
    if gguf:
        g = gguf["series"]
        lines += ["", "| Q4_0 GGUF | TTFT ms | decode tok/s | aggregate tok/s |",
                  "| --- | --- | --- | --- |"]  # fmt: skip
        for key in ("sidelight-1", "llama-1", "sidelight-4", "llama-4"):
            v = g[key]
            lines.append(
                f"| {key} | {v.ttft_ms():.1f} | {v.decode_tps():.2f} | {v.aggregate_tps():.2f} |"
            )
        lines += [
            "",
            f"- Sidelight / llama.cpp decode (1 stream): "
            f"{g['sidelight-1'].decode_tps() / g['llama-1'].decode_tps():.2f}x",
            f"- Sidelight / llama.cpp aggregate (4 streams): "
            f"{g['sidelight-4'].aggregate_tps() / g['llama-4'].aggregate_tps():.2f}x",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--prompt-tokens", type=int, default=100)
    parser.add_argument("--skip-gguf", action="store_true", help="no llama.cpp comparison")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    layout = CacheLayout(args.cache)
    home = layout.root / "serve-bench-home"
    home.mkdir(parents=True, exist_ok=True)
    ir = bench_ir(layout, args, home)
    gguf = None if args.skip_gguf else bench_gguf(layout, args, home)
    print(report(ir, gguf, args))
    if args.json:
        dump = {
            "ir": {k: [r.to_dict() for r in v.runs] for k, v in ir["series"].items()},
            "gguf": {k: [r.to_dict() for r in v.runs] for k, v in gguf["series"].items()}
            if gguf
            else None,
        }
        args.json.write_text(json.dumps(dump, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
