"""Replayed agent sessions (issue 27): Claude Code and Codex turns, Sidelight vs llama-server.

Why: what an agent's user waits for is every turn of a session: a first turn of 10-26k
prompt tokens, then turns that resend the whole conversation plus the last tool result.
The issue's target: a replayed 5-turn Claude Code session completes >= 2x faster than on
llama-server on the same weights.

What: the sessions of ``bench/agent_sessions.py`` (real captured requests, grown turn by
turn as the agents grow them) are posted, streamed, to each server on the endpoint the
agent uses (Claude Code: ``/v1/messages``; Codex: ``/v1/responses``; llama-server serves
both). Per turn: TTFT (request sent to the first ``content_block_delta`` / ``*.delta``
event), turn time (to the end of the stream), prompt tokens, cached tokens as the server
reports them in usage (Anthropic ``cache_read_input_tokens``, Responses
``input_tokens_details.cached_tokens``; both servers report both) and output tokens.
Session time = the sum of its turn times.

How (one run; the machine is shared): rounds interleave the servers, alternating which
goes first. Each session runs on a freshly started server (warmed up by one short
unrelated request), so turn 1 finds nothing cached, as when an agent starts; the server
stops after the session. Every turn caps output at ``--max-tokens`` (greedy); neither
``/v1/messages`` nor ``/v1/responses`` takes ``ignore_eos`` on Sidelight, so the table
prints the output tokens each side produced. ``/proc/loadavg`` is sampled at each turn.

- Sidelight: ``sidelight serve --model IR`` with its defaults, 2 threads, idle unload off.
- llama-server: ``-m GGUF -t 2 -tb 2 -np 1 -c CTX --jinja`` (one slot, so its prompt cache
  serves the next turn, as when one agent uses it).

Run from the repository root with the runtime venv, after ``bench.build_llama_cpp`` and
``bench.build_bench_model``::

    .venv/bin/python -m bench.agent_replay --cache DIR [--agents claude codex]
        [--turns 5] [--rounds 2] [--max-tokens 64] [--ctx 32768] [--no-amx]

On a CPU with AMX the native llama.cpp build crashes in its AMX kernels on its default
repacked weights: ``--no-amx`` runs the ``llama-server`` of the build with AMX compiled out
(``bench.build_llama_cpp --no-amx``), which keeps the repacked AVX-512 path. The older
workaround, ``--llama-arg=--no-repack`` (``--llama-arg`` passes extra flags to
llama-server), turns repacking off too and leaves llama.cpp on slower kernels.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.agent_sessions import Agent, endpoint, session
from bench.common import (
    CacheLayout,
    add_common_args,
    add_no_amx_arg,
    cpu_summary,
    free_port,
    healthy_server,
    median,
    setup_logging,
)

logger = logging.getLogger(__name__)

SERVERS = ("sidelight", "llama-server")


@dataclass
class Turn:
    """One turn's figures, as one streamed request saw them."""

    ttft_s: float
    total_s: float
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    load1: float


# --- the servers ---------------------------------------------------------------------------


@contextlib.contextmanager
def server(name: str, args: argparse.Namespace) -> Iterator[str]:
    """Start one server; yield its base URL once ``/health`` is ok; stop it afterwards."""
    layout = CacheLayout(args.cache)
    port = free_port()
    env: dict[str, str] = {}
    if name == "sidelight":
        ir = args.ir or layout.ov_dir
        cmd = [sys.executable, "-m", "engine.cli", "serve", "--model", str(ir),
               "--port", str(port)]  # fmt: skip
        env = {
            "SIDELIGHT_HOME": str(args.home),
            "SIDELIGHT_CPU_THREADS": str(args.threads),
            "SIDELIGHT_IDLE_UNLOAD_SECONDS": "-1",
        }
    else:
        gguf = args.gguf or layout.gguf_q4_0
        binary = args.llama_server or layout.llama_binary("llama-server", no_amx=args.no_amx)
        cmd = [
            str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
            "-t", str(args.threads), "-tb", str(args.threads), "-np", "1",
            "-c", str(args.ctx), "--jinja", *args.llama_arg,
        ]  # fmt: skip
    with healthy_server(cmd, port, 600, name, env=env):
        yield f"http://127.0.0.1:{port}"


def served_model(url: str) -> str:
    """The model id to put in requests: Sidelight's ``/health`` names it; llama-server
    takes any name for its one model."""
    with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
        model = httpx.get(f"{url}/health", timeout=30).json().get("model")
        if isinstance(model, str) and model:
            return model
    return "sidelight-demo"


# --- one turn ------------------------------------------------------------------------------


def _events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines():
        if line.startswith("data:"):
            data = line[5:].strip()
            if data and data != "[DONE]":
                yield json.loads(data)


def _usage(agent: Agent, event: dict[str, Any], usage: dict[str, int]) -> None:
    """Fold an event's usage into ``usage`` (prompt, cached, output tokens)."""
    kind = event.get("type", "")
    if agent == "claude":
        found = event.get("usage") or (event.get("message") or {}).get("usage")
        if isinstance(found, dict):
            for key in ("input_tokens", "cache_read_input_tokens", "output_tokens"):
                if isinstance(found.get(key), int):
                    usage[key] = found[key]
    elif kind in ("response.completed", "response.incomplete"):
        found = (event.get("response") or {}).get("usage") or {}
        usage["input_tokens"] = int(found.get("input_tokens", 0))
        usage["cached"] = int((found.get("input_tokens_details") or {}).get("cached_tokens", 0))
        usage["output_tokens"] = int(found.get("output_tokens", 0))


def is_first_output(agent: Agent, event: dict[str, Any]) -> bool:
    """Whether an event carries generated text (the first one is TTFT)."""
    kind = str(event.get("type", ""))
    if agent == "claude":
        return kind == "content_block_delta"
    return kind.endswith(".delta")


def run_turn(url: str, agent: Agent, body: dict[str, Any]) -> Turn:
    """POST one streamed turn and time it; raise on an HTTP error or a stream with no output."""
    load1 = os.getloadavg()[0]
    usage: dict[str, int] = {}
    start = time.perf_counter()
    first: float | None = None
    with httpx.stream("POST", url + endpoint(agent), json=body, timeout=3600) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"{url} answered {resp.status_code}: {resp.read()[:500]!r}")
        for event in _events(resp):
            if first is None and is_first_output(agent, event):
                first = time.perf_counter()
            _usage(agent, event, usage)
    end = time.perf_counter()
    output_tokens = usage.get("output_tokens", 0)
    if first is None:
        if not output_tokens:
            raise RuntimeError(f"{url}: the stream carried no output and no output tokens")
        # Tokens were generated but none reached the client as text (a random model's
        # special tokens, or text the tool-call parser held back): TTFT is the whole turn.
        logger.warning(
            "%s: %d output tokens but no delta event; TTFT = turn time", url, output_tokens
        )
        first = end
    if agent == "claude":
        cached = usage.get("cache_read_input_tokens", 0)
        prompt = usage.get("input_tokens", 0) + cached
    else:
        cached, prompt = usage.get("cached", 0), usage.get("input_tokens", 0)
    return Turn(first - start, end - start, prompt, cached, output_tokens, load1)


def run_session(
    name: str, agent: Agent, bodies: list[dict[str, Any]], args: argparse.Namespace
) -> list[Turn]:
    """One session on a freshly started server (nothing cached before turn 1)."""
    with server(name, args) as url:
        model = served_model(url)
        warm = {"model": model, "max_tokens": 4, "stream": True,
                "messages": [{"role": "user", "content": "warm up"}]}  # fmt: skip
        with contextlib.suppress(RuntimeError):  # an empty warm-up reply is fine
            run_turn(url, "claude", warm)
        turns = []
        for i, body in enumerate(bodies, start=1):
            turn = run_turn(url, agent, {**body, "model": model})
            logger.info("%s %s turn %d: %s", agent, name, i, turn)
            turns.append(turn)
        return turns


# --- the run and its table -----------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, dict[str, list[list[Turn]]]]:
    """``{agent: {server: [session's turns per round]}}``, rounds interleaved."""
    results: dict[str, dict[str, list[list[Turn]]]] = {}
    for agent in args.agents:
        bodies = session(agent, args.turns, args.max_tokens)
        for rnd in range(args.rounds):
            order = SERVERS if rnd % 2 == 0 else SERVERS[::-1]
            for name in order:
                if name not in args.servers:
                    continue
                logger.info("%s session, round %d, %s", agent, rnd, name)
                turns = run_session(name, agent, bodies, args)
                results.setdefault(agent, {}).setdefault(name, []).append(turns)
    return results


def report(results: dict[str, dict[str, list[list[Turn]]]]) -> str:
    """Per agent: a row per turn (medians over rounds) and the session totals, with ratios."""
    lines: list[str] = []
    for agent, by_server in results.items():
        names = [n for n in SERVERS if n in by_server]
        turns = max(len(s) for runs in by_server.values() for s in runs)
        lines += [f"### {agent}", ""]
        head = "| turn | " + " | ".join(
            f"{n} prompt / cached | {n} TTFT | {n} turn | {n} out" for n in names
        )
        lines.append(head + " | TTFT ratio | turn ratio |")
        lines.append("| --- |" + " --- | --- | --- | --- |" * len(names) + " --- | --- |")
        for t in range(turns):
            cells, ttft, total = [], {}, {}
            for n in names:
                got = [runs[t] for runs in by_server[n] if len(runs) > t]
                ttft[n] = median([g.ttft_s for g in got])
                total[n] = median([g.total_s for g in got])
                prompt = median([g.prompt_tokens for g in got])
                cached = median([g.cached_tokens for g in got])
                out = median([g.output_tokens for g in got])
                cells.append(
                    f"{prompt:,.0f} / {cached:,.0f} | {ttft[n]:.1f} s | {total[n]:.1f} s | {out:.0f}"
                )
            ratios = (
                f"{ttft['llama-server'] / ttft['sidelight']:.2f}x | "
                f"{total['llama-server'] / total['sidelight']:.2f}x"
                if len(names) == 2
                else "- | -"
            )
            lines.append(f"| {t + 1} | " + " | ".join(cells) + f" | {ratios} |")
        sums = {n: median([sum(g.total_s for g in runs) for runs in by_server[n]]) for n in names}
        rounds = {n: len(by_server[n]) for n in names}
        lines.append("")
        for n in names:
            each = ", ".join(f"{sum(g.total_s for g in runs):.0f} s" for runs in by_server[n])
            lines.append(f"- {n}: session {sums[n]:.0f} s median of {rounds[n]} ({each})")
        if len(names) == 2:
            lines.append(
                f"- **session time llama-server / Sidelight: "
                f"{sums['llama-server'] / sums['sidelight']:.2f}x**"
            )
        loads = [g.load1 for runs in by_server.values() for s in runs for g in s]
        lines.append(
            f"- 1-minute load average at the turns: median {median(loads):.1f}, "
            f"max {max(loads):.1f} (2 cores)"
        )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--agents", nargs="+", choices=("claude", "codex"), default=["claude"])
    parser.add_argument("--servers", nargs="+", choices=SERVERS, default=list(SERVERS))
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=64, help="output cap per turn")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=32768, help="llama-server context")
    parser.add_argument("--ir", type=Path, help="IR folder (default: the bench model's)")
    parser.add_argument("--gguf", type=Path, help="GGUF file (default: the bench model's Q4_0)")
    parser.add_argument("--llama-server", type=Path, help="llama-server binary")
    add_no_amx_arg(parser, "llama-server")
    parser.add_argument(
        "--llama-arg",
        action="append",
        default=[],
        help="extra llama-server argument (repeat), e.g. --llama-arg=--no-repack",
    )
    parser.add_argument("--home", type=Path, default=Path("/tmp/sidelight-agent-replay"))
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    logger.info("%s", cpu_summary())
    results = run(args)
    print(report(results))
    raw = {a: {s: [[asdict(t) for t in runs] for runs in r] for s, r in by.items()}
           for a, by in results.items()}  # fmt: skip
    print(json.dumps(raw), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
