"""Speculative decoding, measured: its mechanics in the pipeline, and the code-rewrite row.

Two parts, each one interleaved run with medians (the machine is shared: quote ratios):

``mechanics`` (in this process, ``ContinuousBatchingPipeline``): plain greedy decoding vs
prompt lookup vs a draft model on the tiny trained models. Random weights accept nothing, so
the prompt is built from a continuation the model is known to produce: greedy ``C`` after
a prompt ``P``, then the prompt ``P + C + P`` (a rewrite whose answer is in the prompt).
Its ``acceptance`` (accepted guesses / generated tokens), ``tokens_per_step`` and speed-up
are an upper bound for real rewrites: a real model copies less of its prompt exactly. The
only same-vocabulary pair here is a model drafting for itself (every guess accepted, and
the draft costs as much as the model): that row shows the mechanics, not a speed-up.
A ``chat`` case (prompt ``P``, no copy in it) shows what speculation costs when there is
little to find.

``rewrite`` (end to end through HTTP): the workload table's code-rewrite row, 1k tokens in
and about 1k out, mostly copied, on the same weights: ``sidelight serve`` (the demo IR) with
prompt lookup on and off vs ``llama-server`` (the demo's f16 GGUF) plain and with its own
n-gram lookup. Each server is timed streaming ``/v1/completions`` (greedy, ``ignore_eos``);
tokens/s = completion tokens / (last token - first token).

Run from the repository root::

    .venv/bin/python -m bench.workloads mechanics --reps 5
    .venv/bin/python -m bench.workloads rewrite --reps 5 --llama-server PATH
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
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import median, setup_logging

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "resources" / "models" / "sidelight-demo"
DEMO_GGUF = ROOT / "tests" / "fixtures" / "sidelight-demo-f16.gguf"
CODER = ROOT / "tests" / "fixtures" / "tiny-coder"
SPEC_TOKENS = 4
NGRAM = 3


# ---- mechanics ------------------------------------------------------------------------


@dataclass
class Sample:
    seconds: float
    tokens: int
    steps: int
    ids: list[int] = field(default_factory=list)


def _pipeline(model: Path, mode: str) -> Any:
    import openvino_genai as ov_genai

    scheduler = ov_genai.SchedulerConfig()
    scheduler.enable_prefix_caching = False  # every repetition prefills the same way
    scheduler.cache_size = 1
    scheduler.dynamic_split_fuse = True
    properties: dict[str, Any] = {"INFERENCE_NUM_THREADS": 2}
    if mode == "lookup":
        properties["prompt_lookup"] = True
    elif mode == "draft":
        properties["draft_model"] = ov_genai.draft_model(str(model), "CPU")
    return ov_genai.ContinuousBatchingPipeline(str(model), scheduler, "CPU", properties)


def _decode(
    pipe: Any, mode: str, ids: list[int], new_tokens: int, temperature: float = 0.0
) -> Sample:
    """One request alone in ``pipe`` (greedy, or sampled at ``temperature`` with a fixed
    seed); decode time from the first token on."""
    import numpy as np
    import openvino as ov

    config = pipe.get_config()
    config.max_new_tokens = new_tokens
    config.do_sample = temperature > 0
    if temperature > 0:
        config.temperature = temperature
        config.top_k = 0
        config.top_p = 1.0
        config.rng_seed = 7
    config.ignore_eos = True
    if mode != "plain":
        config.num_assistant_tokens = SPEC_TOKENS
    if mode == "lookup":
        config.max_ngram_size = NGRAM
    handle = pipe.add_request(0, ov.Tensor(np.array([ids], dtype=np.int64)), config)
    out: list[int] = []
    steps = 0
    first: float | None = None
    while pipe.has_non_finished_requests():
        pipe.step()
        got = 0
        while handle.can_read():
            for output in handle.read().values():
                got += len(output.generated_ids)
                out.extend(output.generated_ids)
        if got:
            steps += 1
            if first is None:
                first = time.perf_counter()
    seconds = time.perf_counter() - (first or time.perf_counter())
    # The first step's token is prefill's; the decode rate counts what came after it.
    return Sample(seconds, len(out) - 1, steps - 1, out)


def _prompt_ids(pipe: Any, model: Path) -> list[int]:
    tokenizer = pipe.get_tokenizer()
    if model == CODER:
        text = "def add(a, b):\n    "
    else:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "Hello"}], add_generation_prompt=True
        )
    return [int(t) for t in tokenizer.encode(text, add_special_tokens=False).input_ids.data[0]]


def mechanics(
    reps: int, new_tokens: int, models: list[Path], modes: list[str], temperature: float = 0.0
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for model in models:
        pipes = {mode: _pipeline(model, mode) for mode in ("plain", *modes)}
        prompt = _prompt_ids(pipes["plain"], model)
        known = _decode(pipes["plain"], "plain", prompt, new_tokens).ids
        cases = {"rewrite": prompt + known + prompt, "chat": prompt}
        for case, ids in cases.items():
            samples: dict[str, list[Sample]] = {mode: [] for mode in pipes}
            for _ in range(reps):  # interleaved: plain, lookup, draft, plain, ...
                for mode, pipe in pipes.items():
                    samples[mode].append(_decode(pipe, mode, ids, new_tokens, temperature))
            plain_rate = median([s.tokens / s.seconds for s in samples["plain"]])
            for mode, got in samples.items():
                rate = median([s.tokens / s.seconds for s in got])
                steps = median([float(s.steps) for s in got])
                tokens = got[0].tokens
                rows.append(
                    {
                        "model": model.name,
                        "case": case,
                        "mode": mode,
                        "same_as_plain": got[0].ids == samples["plain"][0].ids,
                        "acceptance": round((tokens - steps) / tokens, 3),
                        "tokens_per_step": round(tokens / steps, 2),
                        "tok_s": round(rate, 1),
                        "speedup": round(rate / plain_rate, 2),
                    }
                )
    return rows


# ---- rewrite through HTTP -------------------------------------------------------------


@dataclass
class Timed:
    ttft: float
    seconds: float  # first token to last
    tokens: int
    accepted: int | None = None

    @property
    def rate(self) -> float:
        return (self.tokens - 1) / self.seconds if self.seconds > 0 else float("nan")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_healthy(port: int, proc: subprocess.Popen[bytes], timeout: float = 180) -> None:
    from bench.common import wait_healthy

    wait_healthy(port, proc, timeout)


@contextlib.contextmanager
def _server(cmd: list[str], port: int, env: dict[str, str]) -> Iterator[int]:
    logger.info("$ %s", " ".join(cmd))
    log = open(os.devnull, "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=log, stderr=log)
    try:
        _wait_healthy(port, proc)
        yield proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def sidelight(ir: Path, lookup: bool, home: Path) -> tuple[list[str], int, dict[str, str]]:
    port = _free_port()
    cmd = [sys.executable, "-m", "engine.cli", "serve", "--model", str(ir), "--port", str(port)]
    env = {
        "SIDELIGHT_HOME": str(home),
        "SIDELIGHT_STREAM_INTERVAL_MS": "0",  # every step's tokens as they come, like llama
        "SIDELIGHT_PROMPT_LOOKUP": "1" if lookup else "0",
        "SIDELIGHT_SPECULATIVE_TOKENS": str(SPEC_TOKENS),
        "SIDELIGHT_CPU_THREADS": "2",
    }
    return cmd, port, env


def llama_server(binary: Path, gguf: Path, lookup: bool) -> tuple[list[str], int, dict[str, str]]:
    port = _free_port()
    cmd = [
        str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
        "-t", "2", "-tb", "2", "-np", "1", "-c", "4096",
    ]  # fmt: skip
    if lookup:  # llama-server's own n-gram speculation, with its defaults (n=12, m=48)
        cmd += ["--spec-type", "ngram-simple"]
    return cmd, port, {}


def llama_server_matched(binary: Path, gguf: Path) -> tuple[list[str], int, dict[str, str]]:
    """llama-server's n-gram lookup set like Sidelight's: 3-gram match, 4 guessed tokens."""
    cmd, port, env = llama_server(binary, gguf, True)
    cmd += [
        "--spec-ngram-simple-size-n",
        str(NGRAM),
        "--spec-ngram-simple-size-m",
        str(SPEC_TOKENS),
    ]
    return cmd, port, env


def _complete(port: int, prompt: str, new_tokens: int, model: str) -> Timed:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": new_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "cache_prompt": False,
    }
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    started = time.perf_counter()
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"/v1/completions answered {response.status}: {response.read()[:300]!r}")
    first = last = None
    tokens = 0
    accepted: int | None = None
    for raw in response:
        line = raw.strip()
        if not line.startswith(b"data:") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[5:])
        if chunk.get("choices") and chunk["choices"][0].get("text"):
            last = time.perf_counter()
            first = first or last
        usage = chunk.get("usage")
        if usage:
            tokens = int(usage["completion_tokens"])
        timings = chunk.get("timings") or {}
        if "draft_n_accepted" in timings:
            accepted = int(timings["draft_n_accepted"])
    conn.close()
    if first is None or last is None:
        raise RuntimeError("no text streamed")
    return Timed(first - started, last - first, tokens, accepted)


def rewrite_prompt(ir: Path, new_tokens: int) -> str:
    """``P + C + P``: a chat prompt, the model's greedy continuation ``C``, the prompt again."""
    import openvino_genai as ov_genai

    pipe = ov_genai.LLMPipeline(str(ir), "CPU")
    tokenizer = pipe.get_tokenizer()
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hello"}], add_generation_prompt=True
    )
    config = pipe.get_generation_config()
    config.max_new_tokens = new_tokens
    config.do_sample = False
    config.ignore_eos = True
    known = str(pipe.generate(prompt, config))
    return prompt + known + prompt


def _health_accepted(port: int) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/health")
    figures: dict[str, Any] = json.loads(conn.getresponse().read()).get("speculation", {})
    conn.close()
    return next(iter(figures.values()), {})


def rewrite(
    reps: int, new_tokens: int, binary: Path | None, ir: Path, gguf: Path, home: Path
) -> list[dict[str, Any]]:
    prompt = rewrite_prompt(ir, new_tokens)
    servers: dict[str, tuple[list[str], int, dict[str, str]]] = {
        "sidelight": sidelight(ir, False, home / "off"),
        "sidelight+lookup": sidelight(ir, True, home / "on"),
    }
    if binary is not None:
        servers["llama-server"] = llama_server(binary, gguf, False)
        servers["llama-server+ngram(12,48)"] = llama_server(binary, gguf, True)
        servers["llama-server+ngram(3,4)"] = llama_server_matched(binary, gguf)
    results: dict[str, list[Timed]] = {name: [] for name in servers}
    with contextlib.ExitStack() as stack:
        for cmd, port, env in servers.values():
            stack.enter_context(_server(cmd, port, env))
            _complete(port, prompt, 16, ir.name)  # warm-up
        for rep in range(reps):  # interleaved: one request per server per round
            for name, (_, port, _) in servers.items():
                # A fresh first line: no server reuses a cached prompt (a real rewrite's
                # file is new to the server too).
                fresh = f"# revision {rep} of {name}\n{prompt}"
                results[name].append(_complete(port, fresh, new_tokens, ir.name))
        for name, (_, port, _) in servers.items():
            if name.startswith("sidelight"):
                logger.info("%s /health speculation: %s", name, _health_accepted(port))
    base = median([t.rate for t in results.get("llama-server", results["sidelight"])])
    rows = []
    for name, got in results.items():
        rate = median([t.rate for t in got])
        rows.append(
            {
                "server": name,
                "tokens": got[0].tokens,
                "ttft_ms": round(median([t.ttft for t in got]) * 1000, 1),
                "latency_s": round(median([t.ttft + t.seconds for t in got]), 3),
                "tok_s": round(rate, 1),
                "ratio": round(rate / base, 2),
            }
        )
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(row[k]) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=("mechanics", "rewrite"))
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=None)
    parser.add_argument("--llama-server", type=Path, help="llama-server binary (rewrite)")
    parser.add_argument(
        "--model",
        type=Path,
        action="append",
        help="mechanics: an IR folder (repeatable; default: the demo model and tiny-coder)",
    )
    parser.add_argument(
        "--modes", nargs="+", default=["lookup", "draft"], choices=("lookup", "draft")
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="mechanics: sample (seed 7) instead of greedy; on random weights guesses then "
        "fail: what speculation costs when it finds nothing",
    )
    parser.add_argument("--home", type=Path, default=Path("/tmp/sidelight-workloads"))
    parser.add_argument("--ir", type=Path, default=DEMO, help="rewrite: the IR Sidelight serves")
    parser.add_argument(
        "--gguf", type=Path, default=DEMO_GGUF, help="rewrite: the same weights for llama-server"
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    if args.part == "mechanics":
        models = args.model or [DEMO, CODER]
        rows = mechanics(args.reps, args.new_tokens or 200, models, args.modes, args.temperature)
    else:
        rows = rewrite(
            args.reps, args.new_tokens or 900, args.llama_server, args.ir, args.gguf, args.home
        )
    print(_table(rows))
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
