"""Measure llama.cpp on the bench model's Q4_0 GGUF, the same file OpenVINO GenAI loads.

Why: a "same weights, same machine" reference for Sidelight's speed figures.

Two ways, both with the same prompt length, generated tokens and thread count as
``bench.raw_genai``:

- ``llama-bench``: llama.cpp's own microbenchmark. Reports prompt processing (pp) and
  token generation (tg) tokens/s separately; TTFT is estimated as prompt tokens / pp speed.
- ``llama-server``: the server on a free loopback port, timed like an HTTP client sees it
  (streamed ``/completion`` with the very prompt token ids GenAI gets, ``ignore_eos``,
  no prompt cache), with 1 and N concurrent requests (``--parallel N`` slots). This is the
  apples-to-apples baseline for Sidelight's served numbers.

Every measurement records the CPU share other processes used meanwhile (``foreign_cpu``);
the tables use only repetitions at or below ``--max-foreign``.

Run with the runtime venv from the repository root, after ``bench.build_llama_cpp`` and
``bench.build_bench_model``::

    .venv/bin/python -m bench.llama_cpp [--threads 2] [--reps 5] [--concurrency 1 4]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    CacheLayout,
    CpuMeter,
    add_common_args,
    healthy_server,
    median,
    setup_logging,
    wait_for_quiet,
)
from bench.timing import RunResult, TokenTracker
from tests.server.harness import free_port

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LlamaBenchResult:
    """Medians over llama-bench's repetitions."""

    prompt_tokens: int
    new_tokens: int
    threads: int
    reps: int
    pp_tps: float
    tg_tps: float
    foreign_cpu: float  # share of CPU time other processes used during the whole run

    @property
    def ttft_ms_estimate(self) -> float:
        """Prompt processing time of the whole prompt (what a first token waits for)."""
        return self.prompt_tokens / self.pp_tps * 1000


def run_llama_bench(
    binary: Path, model: Path, prompt_tokens: int, new_tokens: int, threads: int, reps: int
) -> LlamaBenchResult:
    """Run ``llama-bench`` once for a pp and a tg test; return the median speeds."""
    cmd = [
        str(binary), "-m", str(model),
        "-p", str(prompt_tokens), "-n", str(new_tokens),
        "-t", str(threads), "-r", str(reps), "-o", "json",
    ]  # fmt: skip
    logger.info("$ %s", " ".join(cmd))
    meter = CpuMeter(child_rusage=True)
    meter.start()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    foreign = meter.stop()
    tests = json.loads(out)
    pp = next(t for t in tests if t["n_prompt"] > 0 and t["n_gen"] == 0)
    tg = next(t for t in tests if t["n_gen"] > 0 and t["n_prompt"] == 0)
    return LlamaBenchResult(
        prompt_tokens=prompt_tokens,
        new_tokens=new_tokens,
        threads=threads,
        reps=reps,
        pp_tps=median(pp["samples_ts"]),
        tg_tps=median(tg["samples_ts"]),
        foreign_cpu=foreign,
    )


# --- llama-server --------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerHandle:
    host: str
    port: int
    pid: int


@contextlib.contextmanager
def llama_server(
    binary: Path,
    model: Path,
    threads: int,
    parallel: int,
    ctx_per_slot: int,
    timeout_s: float = 120,
) -> Iterator[ServerHandle]:
    """Start ``llama-server`` on 127.0.0.1; yield its address and pid once ``/health`` is ok."""
    port = free_port()
    cmd = [
        str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
        "-t", str(threads), "-tb", str(threads),
        "-np", str(parallel), "-c", str(ctx_per_slot * parallel),
    ]  # fmt: skip
    with healthy_server(cmd, port, timeout_s, "llama-server") as proc:
        yield ServerHandle("127.0.0.1", port, proc.pid)


def _stream_completion(
    server: ServerHandle, prompt_ids: Sequence[int], new_tokens: int, tracker: TokenTracker
) -> dict[str, Any]:
    """POST a streamed ``/completion``; feed token arrivals to ``tracker``; return server timings."""
    body = {
        "prompt": list(prompt_ids),
        "n_predict": new_tokens,
        "ignore_eos": True,
        "stream": True,
        "cache_prompt": False,
        "temperature": 0,
    }
    conn = http.client.HTTPConnection(server.host, server.port, timeout=300)
    conn.request("POST", "/completion", json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"/completion answered {response.status}: {response.read()[:200]!r}")
    timings: dict[str, Any] = {}
    for raw in response:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        chunk = json.loads(line[5:])
        tracker.add(time.perf_counter(), len(chunk.get("tokens") or []))
        if chunk.get("stop"):
            timings = chunk.get("timings", {})
    conn.close()
    return timings


def measure_server(
    server: ServerHandle, prompts: Sequence[Sequence[int]], new_tokens: int
) -> RunResult:
    """Send all prompts at once (one thread each) and time them like a streaming client."""
    meter = CpuMeter([os.getpid(), server.pid])
    meter.start()
    start = time.perf_counter()
    trackers = [TokenTracker(len(ids), start) for ids in prompts]
    timings: list[dict[str, Any]] = [{} for _ in prompts]

    def worker(i: int) -> None:
        timings[i] = _stream_completion(server, prompts[i], new_tokens, trackers[i])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    extra = {
        "foreign_cpu": meter.stop(),
        "server_prompt_ms": median([float(t.get("prompt_ms", "nan")) for t in timings]),
        "server_predicted_tps": median(
            [float(t.get("predicted_per_second", "nan")) for t in timings]
        ),
    }
    return RunResult.from_trackers(trackers, extra)


def bench_server(
    binary: Path,
    model: Path,
    prompt_sets: Sequence[Sequence[Sequence[int]]],
    new_tokens: int,
    threads: int,
    warmup: int = 1,
) -> list[RunResult]:
    """Start one server sized for the concurrency of ``prompt_sets``; time each set after warm-up.

    Each result's ``extra["foreign_cpu"]`` is the CPU share other processes used meanwhile.
    """
    concurrency = len(prompt_sets[0])
    ctx_per_slot = max(len(ids) for ids in prompt_sets[0]) + new_tokens + 64
    results = []
    with llama_server(binary, model, threads, concurrency, ctx_per_slot) as server:
        for i, prompts in enumerate(prompt_sets):
            result = measure_server(server, prompts, new_tokens)
            if i >= warmup:
                results.append(result)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--model", type=Path, help="GGUF file (default: the bench model's Q4_0)")
    parser.add_argument("--prompt-tokens", type=int, default=100)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--skip-bench", action="store_true", help="only time llama-server")
    parser.add_argument("--quiet", type=float, default=0.25, help="wait for <= this foreign CPU")
    parser.add_argument("--max-foreign", type=float, default=0.25, help="drop noisier reps")
    args = parser.parse_args(argv)
    setup_logging(args.verbose)

    import openvino_genai as ov_genai  # the IR's tokenizer: same vocabulary and chat template

    from bench.genai_measure import make_prompt_ids

    layout = CacheLayout(args.cache)
    model = args.model or layout.gguf_q4_0
    report: dict[str, Any] = {"model": str(model), "threads": args.threads}
    lines = [
        f"\nllama.cpp on {model.name}: prompt {args.prompt_tokens} tokens, "
        f"{args.new_tokens} new, -t {args.threads}"
    ]
    if not args.skip_bench:
        wait_for_quiet(args.quiet)
        lb = run_llama_bench(
            layout.llama_binary("llama-bench"),
            model,
            args.prompt_tokens,
            args.new_tokens,
            args.threads,
            args.reps,
        )
        report["llama_bench"] = asdict(lb)
        lines.append(
            f"llama-bench (n={lb.reps}, others {lb.foreign_cpu:.0%} CPU): pp {lb.pp_tps:.1f} t/s "
            f"(TTFT ~{lb.ttft_ms_estimate:.0f} ms), tg {lb.tg_tps:.2f} t/s"
        )

    tokenizer = ov_genai.Tokenizer(str(layout.ov_dir))
    lines.append(
        f"{'llama-server':<13} {'n':>5} {'TTFT ms':>8} {'decode t/s':>10} {'aggr t/s':>9} "
        f"{'srv pp ms':>9} {'others':>6}"
    )
    for conc in args.concurrency:
        prompt_sets = [
            [
                make_prompt_ids(tokenizer, args.prompt_tokens, f"llama x{conc} r{rep} q{i}")
                for i in range(conc)
            ]
            for rep in range(1 + args.reps)
        ]
        wait_for_quiet(args.quiet)
        runs = bench_server(
            layout.llama_binary("llama-server"), model, prompt_sets, args.new_tokens, args.threads
        )
        report[f"server_x{conc}"] = [r.to_dict() for r in runs]
        kept = [r for r in runs if not r.extra["foreign_cpu"] > args.max_foreign]
        requests = [req for r in kept for req in r.requests]
        lines.append(
            f"{'x' + str(conc):<13} {len(kept):>2}/{len(runs):<2} "
            f"{median([r.ttft_ms for r in requests]):>8.0f} "
            f"{median([r.decode_tps for r in requests]):>10.2f} "
            f"{median([r.aggregate_tps for r in kept]):>9.2f} "
            f"{median([r.extra['server_prompt_ms'] for r in kept]):>9.0f} "
            f"{median([r.extra['foreign_cpu'] for r in kept]):>6.0%}"
        )
    print("\n".join(lines))
    out = layout.root / "results" / f"llama_cpp-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    logger.info("results saved to %s", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
