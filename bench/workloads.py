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

``table`` (end to end through HTTP): docs/benchmarks.md's workload table, Sidelight vs
llama-server on the same weights, every row interleaved per repetition: autocomplete
(1.5k prompt tokens, 30 out), chat (300 in, 300 out, sampled), agent turn (8k in sharing
7.6k with the previous, untimed turn; 200 out), code rewrite (as above) and 4 concurrent
chats; ``--workload`` picks rows, ``--all`` runs them all.

Run from the repository root::

    .venv/bin/python -m bench.workloads mechanics --reps 5
    .venv/bin/python -m bench.workloads rewrite --reps 5 --llama-server PATH
    .venv/bin/python -m bench.workloads table --all --reps 3 --llama-server PATH --ir IR --gguf GGUF
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import cpu_summary, free_port, median, setup_logging

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
    if mode.startswith("lookup"):
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
        # lookup1: one guess a step, what a hot sampled request gets (Backend._speculate)
        config.num_assistant_tokens = 1 if mode == "lookup1" else SPEC_TOKENS
    if mode.startswith("lookup"):
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
    prompt_tokens: int = 0

    @property
    def rate(self) -> float:
        return (self.tokens - 1) / self.seconds if self.seconds > 0 else float("nan")


@contextlib.contextmanager
def _server(cmd: list[str], port: int, env: dict[str, str]) -> Iterator[int]:
    from bench.common import healthy_server

    with healthy_server(cmd, port, 180, env=env) as proc:
        yield proc.pid


def sidelight(ir: Path, lookup: bool, home: Path) -> tuple[list[str], int, dict[str, str]]:
    port = free_port()
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
    port = free_port()
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
    return _streamed(port, body, timeout=600)


def _streamed(port: int, body: dict[str, object], timeout: float) -> Timed:
    """POST a streamed ``/v1/completions`` and time it: TTFT, first to last token, the
    completion and prompt tokens from the usage chunk, accepted guesses from ``timings``
    (Sidelight's and llama-server's field)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    started = time.perf_counter()
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"/v1/completions answered {response.status}: {response.read()[:300]!r}")
    first = last = None
    tokens = prompt_tokens = 0
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
            prompt_tokens = int(usage.get("prompt_tokens") or 0)
        timings = chunk.get("timings") or {}
        if "draft_n_accepted" in timings:
            accepted = int(timings["draft_n_accepted"])
    conn.close()
    if first is None or last is None:
        raise RuntimeError("no text streamed")
    return Timed(first - started, last - first, tokens, accepted, prompt_tokens)


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


# ---- the workload table ---------------------------------------------------------------

WORKLOADS = ("autocomplete", "chat", "agent", "rewrite", "concurrent")
CHAT_TEMPERATURE = 1.0  # what an OpenAI-style client sends when it sets nothing
AGENT_SHARED = 7600  # tokens of the previous turn the agent's next turn starts with
AGENT_NEW = 400  # tokens the next turn adds (the tool's output, the next instruction)


@dataclass(frozen=True)
class Shape:
    """One workload: the prompts of one repetition and how they are sampled."""

    prompts: list[str]  # one per concurrent stream
    new_tokens: int
    temperature: float
    warm: str | None = None  # sent first, untimed (the agent's previous turn)


class _Text:
    """Prompt text of an exact token count, cut from the repository's own Python source."""

    def __init__(self, ir: Path) -> None:
        import openvino_genai as ov_genai

        self.tokenizer = ov_genai.Tokenizer(str(ir))
        source = "\n".join(p.read_text() for p in sorted((ROOT / "engine").rglob("*.py")))
        self.ids = self._encode(source)
        self.chat_template = lambda text: self.tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True
        )

    def _encode(self, text: str) -> list[int]:
        encoded = self.tokenizer.encode(text, add_special_tokens=False).input_ids.data[0]
        return [int(t) for t in encoded]

    def cut(self, start: int, count: int) -> str:
        return str(self.tokenizer.decode(self.ids[start : start + count]))


def _shape(workload: str, text: _Text, rep: int, rewrite: str, rewrite_tokens: int) -> Shape:
    """The prompts of ``workload`` for repetition ``rep``: a fresh first line each time, so
    only what the workload shares (the agent's previous turn) can come from a cache."""
    head = f"# request {rep} {time.time_ns()}\n"
    if workload == "autocomplete":
        # The demo tokenizer has no FIM tokens: prefix and suffix go in a plain prompt of
        # the same length (what a FIM request costs: its prompt's prefill and 30 tokens).
        before, after = text.cut(0, 1200), text.cut(1300, 300)
        prompt = f"{head}<prefix>\n{before}\n<suffix>\n{after}\n<middle>\n"
        return Shape([prompt], 30, 0.0)
    if workload in ("chat", "concurrent"):
        streams = 4 if workload == "concurrent" else 1
        prompts = [text.chat_template(head + text.cut(2000 + 400 * i, 290)) for i in range(streams)]
        return Shape(prompts, 300, CHAT_TEMPERATURE)
    if workload == "agent":
        previous = head + text.cut(4000, AGENT_SHARED)
        turn = previous + text.cut(12000, AGENT_NEW)
        return Shape([turn], 200, 0.0, warm=previous)
    return Shape([f"{head}{rewrite}"], rewrite_tokens, 0.0)


def _stream(port: int, prompt: str, new_tokens: int, temperature: float, model: str) -> Timed:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": new_tokens,
        "temperature": temperature,
        "top_p": 1.0,
        "seed": 7,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    return _streamed(port, body, timeout=900)


@dataclass
class Round:
    """One repetition of a workload on one server: every stream's timing and the wall time."""

    streams: list[Timed]
    wall: float


def _run_round(port: int, shape: Shape, model: str) -> Round:
    import threading

    if shape.warm is not None:
        _stream(port, shape.warm, 1, 0.0, model)
    results: list[Timed | None] = [None] * len(shape.prompts)

    def one(i: int) -> None:
        results[i] = _stream(port, shape.prompts[i], shape.new_tokens, shape.temperature, model)

    started = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(shape.prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    if any(r is None for r in results):
        raise RuntimeError("a stream failed (see the log above)")
    return Round([r for r in results if r is not None], wall)


def _llama_table_server(
    binary: Path, gguf: Path, slots: int, threads: int
) -> tuple[list[str], int, dict[str, str]]:
    """llama-server as a user runs it: its defaults (prompt cache on), ``threads`` threads, 10k
    context per slot (the agent turn's 8k prompt and its answer); the model's context
    length raised to the 16k the IR's config was given (``--ir``)."""
    port = free_port()
    cmd = [
        str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
        "-t", str(threads), "-tb", str(threads), "-np", str(slots), "-c", str(10240 * slots),
        # The bench model's GGUF says 4096 (its config); Sidelight serves it with 16k.
        "--override-kv", "qwen2.context_length=int:16384",
    ]  # fmt: skip
    return cmd, port, {}


def _sidelight_table_server(
    ir: Path, home: Path, lookup: bool | None
) -> tuple[list[str], int, dict[str, str]]:
    """``sidelight serve`` with its defaults but 2 threads (``lookup`` None: the default)."""
    port = free_port()
    cmd = [sys.executable, "-m", "engine.cli", "serve", "--model", str(ir), "--port", str(port)]
    env = {
        "SIDELIGHT_HOME": str(home),
        "SIDELIGHT_CPU_THREADS": "2",
        "SIDELIGHT_IDLE_UNLOAD_SECONDS": "-1",  # no reload between repetitions
    }
    if lookup is not None:
        env["SIDELIGHT_PROMPT_LOOKUP"] = "1" if lookup else "0"
    return cmd, port, env


def table(
    workloads: list[str],
    reps: int,
    ir: Path,
    gguf: Path,
    binary: Path,
    home: Path,
    lookup_variants: bool,
    rewrite_tokens: int,
    llama_threads: int,
) -> list[dict[str, Any]]:
    """Every workload on every server, interleaved: for each repetition, each workload runs
    on Sidelight, then on llama-server (then on the Sidelight variants), in turn."""
    text = _Text(ir)
    rewrite = rewrite_prompt(ir, rewrite_tokens) if "rewrite" in workloads else ""
    servers: dict[str, tuple[list[str], int, dict[str, str]]] = {
        "sidelight": _sidelight_table_server(ir, home / "default", None),
        "llama-server": _llama_table_server(binary, gguf, 1, llama_threads),
    }
    if "concurrent" in workloads:
        servers["llama-server -np 4"] = _llama_table_server(binary, gguf, 4, llama_threads)
    if lookup_variants:
        servers["sidelight lookup on"] = _sidelight_table_server(ir, home / "on", True)
        servers["sidelight lookup off"] = _sidelight_table_server(ir, home / "off", False)
    results: dict[tuple[str, str], list[Round]] = {}
    loads: dict[str, list[float]] = {w: [] for w in workloads}
    with contextlib.ExitStack() as stack:
        for cmd, port, env in servers.values():
            stack.enter_context(_server(cmd, port, env))
            _stream(port, "warm up", 8, 0.0, ir.name)
        for rep in range(reps):
            for workload in workloads:
                shape = _shape(workload, text, rep, rewrite, rewrite_tokens)
                loads[workload].append(os.getloadavg()[0])
                for name, (_, port, _) in servers.items():
                    if name.startswith("sidelight lookup") and shape.temperature == 0:
                        continue  # the lookup choice is about sampled requests
                    slots = 4 if name == "llama-server -np 4" else 1
                    if name.startswith("llama-server") and slots != len(shape.prompts):
                        continue  # one slot for one stream, four for four
                    got = _run_round(port, shape, ir.name)
                    results.setdefault((workload, name), []).append(got)
                    logger.info("%s %s rep %d: %s", workload, name, rep, got)
    return _rows(workloads, results, loads)


def _rows(
    workloads: list[str], results: dict[tuple[str, str], list[Round]], loads: dict[str, list[float]]
) -> list[dict[str, Any]]:
    rows = []
    for workload in workloads:
        runs = {name: got for (w, name), got in results.items() if w == workload}
        base = next(got for name, got in runs.items() if name.startswith("llama-server"))
        base_wall = median([r.wall for r in base])
        base_rate = median([sum(t.tokens for t in r.streams) / r.wall for r in base])
        for name, got in runs.items():
            wall = median([r.wall for r in got])
            rate = median([sum(t.tokens for t in r.streams) / r.wall for r in got])
            streams = [t for r in got for t in r.streams]
            rows.append(
                {
                    "workload": workload,
                    "server": name,
                    "prompt_tokens": streams[0].prompt_tokens,
                    "tokens": sum(t.tokens for t in got[0].streams),
                    "ttft_s": round(median([t.ttft for t in streams]), 3),
                    "latency_s": round(wall, 2),
                    "tok_s": round(rate, 1),
                    "decode_tok_s": round(median([t.rate for t in streams]), 1),
                    "speed_vs_llama": round(base_wall / wall, 2),
                    "tok_s_vs_llama": round(rate / base_rate, 2),
                    "load": " to ".join(
                        f"{x:.1f}" for x in (min(loads[workload]), max(loads[workload]))
                    ),
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
    parser.add_argument("part", choices=("mechanics", "rewrite", "table"))
    parser.add_argument(
        "--workload", action="append", choices=WORKLOADS, help="table: a row (repeatable)"
    )
    parser.add_argument("--all", action="store_true", help="table: every row")
    parser.add_argument(
        "--llama-threads",
        type=int,
        default=2,
        help="table: llama-server's -t/-tb (on a busy 2-core machine 1 is far faster: its "
        "threads wait for each other at every operation)",
    )
    parser.add_argument(
        "--lookup-variants",
        action="store_true",
        help="table: also Sidelight with prompt lookup forced on and off",
    )
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
        "--modes", nargs="+", default=["lookup", "draft"], choices=("lookup", "lookup1", "draft")
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
    print(f"Machine: {cpu_summary()}")
    if args.part == "mechanics":
        models = args.model or [DEMO, CODER]
        rows = mechanics(args.reps, args.new_tokens or 200, models, args.modes, args.temperature)
    elif args.part == "table":
        if args.llama_server is None:
            parser.error("table needs --llama-server")
        chosen = list(WORKLOADS) if args.all else args.workload
        if not chosen:
            parser.error("table needs --workload or --all")
        rows = table(
            chosen, args.reps, args.ir, args.gguf, args.llama_server, args.home,
            args.lookup_variants, args.new_tokens or 1000, args.llama_threads,
        )  # fmt: skip
    else:
        rows = rewrite(
            args.reps, args.new_tokens or 900, args.llama_server, args.ir, args.gguf, args.home
        )
    print(_table(rows))
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
