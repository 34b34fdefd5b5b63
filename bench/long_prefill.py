"""Long-context prefill (issue 27): 8k/16k/32k tokens, GenAI raw and served vs llama.cpp.

Why: agent prompts are 10-26k tokens on turn one and grow toward the model's window, so
the figure that decides an agent turn is prefill at long lengths, not at 100 tokens. The
issue's targets: prefill of 8k >= 3.0x llama.cpp, of 32k >= 2.5x, served >= 0.9x raw.

How (one run; the machine is shared, so the sides alternate round by round and every
measurement records the CPU share other processes used, ``others``):

- raw: a ``ContinuousBatchingPipeline`` configured as the engine worker configures it
  (prefix caching on, dynamic split-fuse on, default ``max_num_batched_tokens``), the KV
  precision given by ``--kv`` (the server's choice on this machine), 2 new tokens; TTFT is
  the first token's arrival;
- served: ``sidelight serve`` on the same IR (fresh ``SIDELIGHT_HOME``, self-tune off,
  the same KV precision), one streamed chat request; TTFT is the first content chunk;
- llama.cpp: ``llama-bench -p N -n 0`` on the Q4_0 GGUF of the same weights, same threads;
  TTFT = N / pp tokens/s.

Each request gets a unique salt first in its prompt, so prefix caching never makes a
repeated prompt look free. Then the knob variants run on the raw side at ``--knob-length``:
KV precision u8/u4, prefill chunk (``max_num_batched_tokens``), and GenAI's sparse
prefill (``SparseAttentionConfig``: XAttention, tri-shape); a variant the CPU plugin
refuses is reported with its error instead of a figure.

Run from the repository root with the runtime venv, after ``bench.build_llama_cpp`` and
``bench.build_bench_model`` (the IR's ``max_position_embeddings`` must reach the longest
prompt)::

    .venv/bin/python -m bench.long_prefill --cache DIR [--lengths 8192 16384 32768]
        [--reps 2] [--once-above 16384] [--knob-length 8192] [--no-knobs] [--no-amx]

``--no-amx`` takes ``llama-bench`` from the build with AMX compiled out
(``bench.build_llama_cpp --no-amx``): on a CPU whose AMX kernels crash, the native build's
``llama-bench`` fails on the repacked weights it uses by default.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    CacheLayout,
    CpuMeter,
    add_common_args,
    add_no_amx_arg,
    cpu_summary,
    median,
    setup_logging,
    sse_chunks,
    wait_for_quiet,
)
from bench.genai_measure import FILLER, load_cb_pipeline, make_prompt_ids, measure_cb

logger = logging.getLogger(__name__)

SIDES = ("raw", "served", "llama.cpp")
NEW_TOKENS = 2  # the first token is what prefill costs; a second proves decoding goes on


@dataclass
class Cell:
    """The repetitions of one (side, length): TTFT seconds and what others used meanwhile."""

    ttft_s: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    others: list[float] = field(default_factory=list)
    error: str | None = None

    def add(self, ttft_s: float, tokens: int, others: float) -> None:
        self.ttft_s.append(ttft_s)
        self.tokens.append(tokens)
        self.others.append(others)

    @property
    def tps(self) -> float:
        """Median prefill tokens/s (prompt tokens / TTFT)."""
        return median([n / t for n, t in zip(self.tokens, self.ttft_s, strict=True)])

    @property
    def ttft(self) -> float:
        return median(self.ttft_s)


# --- the three sides -----------------------------------------------------------------------


def scheduler(chunk: int | None = None, sparse: str | None = None) -> Any:
    """The worker's scheduler settings (engine/worker/process.py), plus the knobs varied here."""
    import openvino_genai as ov_genai

    config = ov_genai.SchedulerConfig()
    config.enable_prefix_caching = True
    config.dynamic_split_fuse = True
    config.cache_size = 2  # GB: 32k tokens of this shape take 0.4 GB at f16
    if chunk is not None:
        config.max_num_batched_tokens = chunk
    if sparse is not None:
        config.use_sparse_attention = True
        config.sparse_attention_config = ov_genai.SparseAttentionConfig(
            mode=getattr(ov_genai.SparseAttentionMode, sparse.upper())
        )
    return config


class Raw:
    """One loaded raw pipeline; ``measure`` prefills one salted prompt of ``n`` tokens."""

    def __init__(self, model: Path, kv: str, chunk: int | None = None, sparse: str | None = None):
        self.pipe, load_s = load_cb_pipeline(
            model, scheduler(chunk, sparse), {"KV_CACHE_PRECISION": kv}
        )
        logger.info("raw pipeline (kv %s, chunk %s, sparse %s) in %.1fs", kv, chunk, sparse, load_s)
        self.tokenizer = self.pipe.get_tokenizer()
        self.rid = 0

    def measure(self, n: int, salt: str) -> tuple[float, int]:
        ids = make_prompt_ids(self.tokenizer, n, salt)
        self.rid += 1
        result = measure_cb(self.pipe, [ids], NEW_TOKENS, self.rid)
        return result.requests[0].ttft_ms / 1000, len(ids)


def chat_text(tokenizer: Any, n: int, salt: str) -> str:
    """User text whose chat-templated prompt has ``n`` tokens, give or take a few."""
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": ""}], add_generation_prompt=True
    )
    overhead = len(tokenizer.encode(rendered, add_special_tokens=False).input_ids.data[0])
    text = f"[{salt}] "
    while len(text) < 6 * n:
        text += FILLER
    body = tokenizer.encode(text, add_special_tokens=False).input_ids.data[0][: n - overhead]
    return str(tokenizer.decode([int(i) for i in body]))


@contextmanager
def served(model: Path, home: Path, kv: str) -> Iterator[tuple[str, list[int]]]:
    """``sidelight serve`` on the IR with the given KV precision; yields its base URL and the
    pids of the server and its engine worker (their CPU is ours, not the others')."""
    import psutil

    from tests.server.harness import ServerProcess

    # The other sides take minutes between two served requests: the idle unload must not
    # end the worker meanwhile (the next request would wait for a load).
    env = {
        "SIDELIGHT_CPU_KV_CACHE_PRECISION": kv,
        "SIDELIGHT_STREAM_INTERVAL_MS": "0",
        "SIDELIGHT_IDLE_UNLOAD_SECONDS": "-1",
    }
    proc = ServerProcess(home, model, env=env)
    try:
        proc.wait_ready(timeout=600)
        root = psutil.Process(proc.process.pid)
        yield proc.base_url, [root.pid] + [c.pid for c in root.children(recursive=True)]
    finally:
        proc.stop()


def measure_served(url: str, text: str) -> tuple[float, int]:
    """One streamed chat request; TTFT = first content chunk; prompt tokens from usage."""
    model = str(httpx.get(f"{url}/health").json()["model"])
    body = {
        "model": model, "messages": [{"role": "user", "content": text}],
        "max_tokens": NEW_TOKENS, "temperature": 0, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True},
    }  # fmt: skip
    start = time.perf_counter()
    first: float | None = None
    prompt_tokens = 0
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=1800) as resp:
        resp.raise_for_status()
        for chunk in sse_chunks(resp):
            if chunk.get("usage"):
                prompt_tokens = int(chunk["usage"]["prompt_tokens"])
            if first is None and chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                first = time.perf_counter()
    if first is None:
        raise RuntimeError("the served stream had no content")
    return first - start, prompt_tokens


def measure_llama(binary: Path, gguf: Path, n: int, threads: int) -> tuple[float, int]:
    """``llama-bench -p n -n 0 -r 1``: one prefill of n tokens; TTFT = n / pp tokens/s.

    Above 16k tokens llama-bench's warm-up (a whole prefill of the same length, untimed) is
    skipped: at 32k it doubles a run of several minutes, and the weights are loaded and
    repacked before either prefill."""
    cmd = [str(binary), "-m", str(gguf), "-p", str(n), "-n", "0", "-t", str(threads),
           "-r", "1", "-o", "json"]  # fmt: skip
    if n > 16384:
        cmd.append("--no-warmup")
    logger.info("$ %s", " ".join(cmd))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    test = json.loads(out)[0]
    return n / median(test["samples_ts"]), n


def timed(
    fn: Callable[[], tuple[float, int]],
    cell: Cell,
    quiet: float,
    child: bool,
    pids: Sequence[int] = (),
) -> None:
    """Wait for a quiet machine, run ``fn``, record its TTFT and the others' CPU share
    (``pids``: processes besides this one whose CPU counts as ours)."""
    wait_for_quiet(quiet, timeout_s=60)
    meter = CpuMeter([os.getpid(), *pids], child_rusage=child)
    meter.start()
    try:
        ttft, tokens = fn()
    except Exception as exc:  # a knob the plugin refuses: its error is the result
        logger.warning("failed: %s", exc)
        cell.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        return
    cell.add(ttft, tokens, meter.stop())
    logger.info("  %.1fs for %d tokens (%.0f tok/s)", ttft, tokens, tokens / ttft)


# --- the run -------------------------------------------------------------------------------


def run_lengths(args: argparse.Namespace, cells: dict[str, dict[int, Cell]]) -> None:
    """The three sides at each length, round by round (the raw pipeline freed on return)."""
    layout = CacheLayout(args.cache)
    bench_bin = layout.llama_binary("llama-bench", no_amx=args.no_amx)
    raw = Raw(layout.ov_dir, args.kv)
    with served(layout.ov_dir, args.home / "serve", args.kv) as (url, server_pids):
        measure_served(url, chat_text(raw.tokenizer, 256, "warm-up"))
        raw.measure(256, "warm-up")
        for n in args.lengths:
            for rep in range(1 if n > args.once_above else args.reps):
                logger.info("length %d, round %d", n, rep)
                text = chat_text(raw.tokenizer, n, f"served-{n}-{rep}")
                sides: list[tuple[str, Callable[[], tuple[float, int]], bool, list[int]]] = [
                    ("raw", partial(raw.measure, n, f"raw-{n}-{rep}"), False, []),
                    ("served", partial(measure_served, url, text), False, server_pids),
                    (
                        "llama.cpp",
                        partial(measure_llama, bench_bin, layout.gguf_q4_0, n, args.threads),
                        True,
                        [],
                    ),
                ]
                sides = [side for side in sides if side[0] in args.sides]
                order = sides[rep % len(sides) :] + sides[: rep % len(sides)]  # none always first
                for side, fn, child, pids in order:
                    logger.info(" %s", side)
                    cell = cells.setdefault(side, {}).setdefault(n, Cell())
                    timed(fn, cell, args.max_foreign, child, pids)


def run_knob(
    args: argparse.Namespace, cell: Cell, kv: str, chunk: int | None, sparse: str | None
) -> None:
    """One raw variant at ``--knob-length``; a pipeline the plugin refuses records its error."""
    try:
        pipe = Raw(CacheLayout(args.cache).ov_dir, kv, chunk, sparse)
    except Exception as exc:
        cell.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        logger.warning("refused: %s", exc)
        return
    timed(partial(pipe.measure, 256, "warm-up"), Cell(), args.max_foreign, False)
    for rep in range(args.knob_reps):
        salt = f"knob-{kv}-{chunk}-{sparse}-{rep}"
        timed(partial(pipe.measure, args.knob_length, salt), cell, args.max_foreign, False)


def main_run(args: argparse.Namespace) -> dict[str, dict[int, Cell]]:
    cells: dict[str, dict[int, Cell]] = {}
    run_lengths(args, cells)
    if args.no_knobs:
        return cells
    variants: list[tuple[str, str, int | None, str | None]] = [
        (f"raw kv {args.kv} (base)", args.kv, None, None),
        ("raw kv u8", "u8", None, None),
        ("raw kv u4", "u4", None, None),
        ("raw chunk 512", args.kv, 512, None),
        ("raw chunk 2048", args.kv, 2048, None),
        ("raw xattention", args.kv, None, "xattention"),
        ("raw tri-shape", args.kv, None, "trishape"),
    ]
    for name, kv, chunk, sparse in variants:
        logger.info("knob %s at %d", name, args.knob_length)
        run_knob(
            args, cells.setdefault(name, {}).setdefault(args.knob_length, Cell()), kv, chunk, sparse
        )
    return cells


def report(cells: dict[str, dict[int, Cell]], lengths: list[int]) -> str:
    def fmt(c: Cell | None) -> str:
        if c is None:
            return "-"
        if c.error and not c.ttft_s:
            return f"error: {c.error}"
        return f"{c.ttft:.1f} s / {c.tps:.0f} tok/s (n={len(c.ttft_s)})"

    lines = ["| side | " + " | ".join(f"{n} tokens" for n in lengths) + " |"]
    lines.append("| --- |" + " --- |" * len(lengths))
    for side in ("raw", "served", "llama.cpp"):
        row = cells.get(side, {})
        lines.append(f"| {side} | " + " | ".join(fmt(row.get(n)) for n in lengths) + " |")

    def ratio(a: str, b: str, n: int) -> str:
        ca, cb = cells.get(a, {}).get(n), cells.get(b, {}).get(n)
        return f"{ca.tps / cb.tps:.2f}x" if ca and cb and ca.ttft_s and cb.ttft_s else "-"

    lines.append(
        "| raw / llama.cpp | " + " | ".join(ratio("raw", "llama.cpp", n) for n in lengths) + " |"
    )
    lines.append(
        "| served / llama.cpp | "
        + " | ".join(ratio("served", "llama.cpp", n) for n in lengths)
        + " |"
    )
    lines.append(
        "| served / raw | " + " | ".join(ratio("served", "raw", n) for n in lengths) + " |"
    )
    base = lengths[0]
    for side in ("raw", "served", "llama.cpp"):
        row = cells.get(side, {})
        first = row.get(base)
        rel = [
            f"{row[n].tps / first.tps:.2f}x" if first and n in row and row[n].ttft_s else "-"
            for n in lengths
        ]
        lines.append(f"| {side} tok/s vs {base} | " + " | ".join(rel) + " |")
    others = [o for row in cells.values() for c in row.values() for o in c.others]
    lines.append("")
    lines.append(
        f"others' CPU share: median {median(others):.0%}, max {max(others, default=0):.0%}"
    )
    knobs = [(side, row) for side, row in cells.items() if side.startswith("raw ")]
    if knobs:
        lines += [
            "",
            "| knob (raw) | length | TTFT / prefill | vs base |",
            "| --- | --- | --- | --- |",
        ]
        base_cell = next((next(iter(r.values())) for s, r in knobs if "(base)" in s), None)
        for side, row in knobs:
            for n, c in row.items():
                vs = f"{c.tps / base_cell.tps:.2f}x" if base_cell and c.ttft_s else "-"
                lines.append(f"| {side} | {n} | {fmt(c)} | {vs} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--lengths", type=int, nargs="+", default=[8192, 16384, 32768])
    parser.add_argument("--reps", type=int, default=2, help="rounds per length")
    parser.add_argument("--once-above", type=int, default=16384, help="one round above this")
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    add_no_amx_arg(parser, "llama-bench")
    parser.add_argument("--kv", default="f16", help="KV precision of raw and served")
    parser.add_argument(
        "--sides", nargs="+", choices=SIDES, default=list(SIDES), help="sides to measure"
    )
    parser.add_argument("--knob-length", type=int, default=8192)
    parser.add_argument("--knob-reps", type=int, default=1)
    parser.add_argument("--no-knobs", action="store_true")
    parser.add_argument("--max-foreign", type=float, default=0.25, help="wait below this share")
    parser.add_argument("--home", type=Path, default=Path("/tmp/sidelight-long-prefill"))
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    logger.info("%s", cpu_summary())
    cells = main_run(args)
    print(report(cells, args.lengths))
    out = {s: {n: vars(c) for n, c in row.items()} for s, row in cells.items()}
    print(json.dumps(out), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
