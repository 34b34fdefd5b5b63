"""Measure raw OpenVINO GenAI on the bench model: CPU properties, pipelines, IR vs GGUF.

Why: gives the ceiling Sidelight's served figures are judged against, and settles which
CPU properties the engine should set on small laptops (DESIGN.md reports CPU pinning made
decoding 2.8x slower on 2-core machines; this checks it with medians).

What: every configuration ("case") runs in its own child process (a fresh OpenVINO core,
thread pool and KV cache), which loads the pipeline, warms up, and times ``--reps``
generations of ``--new-tokens`` tokens after a ``--prompt-tokens`` prompt (greedy,
``ignore_eos``). Cases run in ``--rounds`` interleaved rounds so that background load on a
shared machine hits every case alike. Tables give medians over all rounds and reps.

Plans:

- ``sweep``: ``LLMPipeline`` on the int4 IR under CPU property variants: pinning, thread
  count, KV cache precision, inference precision, dynamic quantization group size,
  attention backend.
- ``engines``: ``LLMPipeline`` and ``ContinuousBatchingPipeline`` with 1 and 4 concurrent
  requests, on the int4 IR and on the Q4_0 GGUF (``--props`` sets CPU properties for all).
- ``scheduler``: ``SchedulerConfig`` variants (split-fuse, batch token budget, prefix
  caching) for 4 concurrent requests.

Run with the runtime venv, from the repository root, after ``bench.build_bench_model``::

    .venv/bin/python -m bench.raw_genai sweep   [--rounds 2 --reps 3]
    .venv/bin/python -m bench.raw_genai engines [--props '{"ENABLE_CPU_PINNING": false}']

Results are also written as JSON to ``CACHE/results/``; ``report FILE --max-foreign 0.1``
prints a saved run's table again with another noise cut-off.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    CacheLayout,
    CpuMeter,
    add_common_args,
    median,
    setup_logging,
    wait_for_quiet,
)

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Case:
    """One configuration to measure."""

    label: str
    model: str = "ir"  # "ir", "gguf", or a path
    pipeline: str = "llm"  # "llm" (LLMPipeline) or "cb" (ContinuousBatchingPipeline)
    concurrency: int = 1
    properties: dict[str, Any] = field(default_factory=dict)
    scheduler: dict[str, Any] = field(
        default_factory=dict
    )  # kwargs of genai_measure.scheduler_config


@dataclass(frozen=True)
class Workload:
    prompt_tokens: int = 100
    new_tokens: int = 128
    reps: int = 3
    warmup: int = 1


@dataclass
class CaseResult:
    case: Case
    load_s: list[float] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    def row(self, max_foreign: float = 1.0) -> dict[str, Any]:
        """Medians over the repetitions during which other processes used <= ``max_foreign``."""
        runs = [r for r in self.runs if not r["extra"]["foreign_cpu"] > max_foreign]
        requests = [r for run in runs for r in run["requests"]]
        return {
            "case": self.case.label,
            "n": len(runs),
            "n_all": len(self.runs),
            "ttft_ms": median([r["ttft_ms"] for r in requests]),
            "decode_tps": median([r["decode_tps"] for r in requests]),
            "aggregate_tps": median([run["aggregate_tps"] for run in runs]),
            "load_s": median(self.load_s),
            "foreign_cpu": median([run["extra"]["foreign_cpu"] for run in runs]),
        }


def resolve_model(layout: CacheLayout, model: str) -> Path:
    if model == "ir":
        return layout.ov_dir
    if model == "gguf":
        return layout.gguf_q4_0
    return Path(model)


# --- the child process ---------------------------------------------------------------------


def run_case_here(case: Case, model_path: Path, workload: Workload, salt: str) -> dict[str, Any]:
    """Load the case's pipeline in this process and time it; return a JSON-able dict."""
    from bench import genai_measure as gm

    if case.pipeline == "llm":
        pipe, load_s = gm.load_llm_pipeline(model_path, case.properties)
        tokenizer = pipe.get_tokenizer()
    elif case.pipeline == "cb":
        sched = gm.scheduler_config(**case.scheduler)
        logger.info("scheduler: %s", sched.to_string().replace("\n", " "))
        pipe, load_s = gm.load_cb_pipeline(model_path, sched, case.properties)
        tokenizer = pipe.get_tokenizer()
    else:
        raise ValueError(f"unknown pipeline {case.pipeline!r}")

    runs: list[dict[str, Any]] = []
    next_id = 0
    meter = CpuMeter()
    for rep in range(workload.warmup + workload.reps):
        prompts = [
            gm.make_prompt_ids(tokenizer, workload.prompt_tokens, f"{salt} r{rep} q{i}")
            for i in range(case.concurrency)
        ]
        meter.start()
        if case.pipeline == "llm":
            result = gm.measure_llm(pipe, prompts[0], workload.new_tokens)
        else:
            result = gm.measure_cb(pipe, prompts, workload.new_tokens, first_request_id=next_id)
            next_id += case.concurrency
        result.extra["foreign_cpu"] = meter.stop()
        if rep >= workload.warmup:
            runs.append(result.to_dict())
            first = result.requests[0]
            logger.info(
                "%s rep %d: ttft %.0f ms, decode %.2f tok/s, aggregate %.2f tok/s, others %.0f%% CPU",
                case.label,
                rep - workload.warmup,
                first.ttft_ms,
                first.decode_tps,
                result.aggregate_tps,
                result.extra["foreign_cpu"] * 100,
            )
    return {"load_s": load_s, "runs": runs}


def run_case_subprocess(
    case: Case, model_path: Path, workload: Workload, salt: str
) -> dict[str, Any]:
    """Run ``run_case_here`` in a child process; return its dict (or ``{"error": ...}``)."""
    spec = {
        "case": asdict(case),
        "model_path": str(model_path),
        "workload": asdict(workload),
        "salt": salt,
    }
    proc = subprocess.run(
        [sys.executable, "-m", "bench.raw_genai", "worker", json.dumps(spec)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        check=False,  # a failed case is reported in the table, not fatal
        text=True,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"error": f"worker exited with {proc.returncode}"}
    return dict(json.loads(lines[-1]))


def run_cases(
    layout: CacheLayout, cases: list[Case], workload: Workload, rounds: int, quiet: float = 1.0
) -> list[CaseResult]:
    """Run every case ``rounds`` times, interleaved, each time in a fresh process.

    Before each process starts, waits (bounded) until other processes use at most ``quiet``
    of the machine's CPU time.
    """
    results = [CaseResult(case) for case in cases]
    for rnd in range(rounds):
        for result in results:
            if result.error:
                continue
            logger.info("round %d/%d: %s", rnd + 1, rounds, result.case.label)
            wait_for_quiet(quiet)
            model_path = resolve_model(layout, result.case.model)
            out = run_case_subprocess(
                result.case, model_path, workload, f"{result.case.label} {rnd}"
            )
            if "error" in out:
                result.error = str(out["error"])
                logger.error("%s failed: %s", result.case.label, result.error)
                continue
            result.load_s.append(float(out["load_s"]))
            result.runs.extend(out["runs"])
    return results


# --- plans ---------------------------------------------------------------------------------


def sweep_cases() -> list[Case]:
    """CPU property variants of ``LLMPipeline`` on the int4 IR."""
    variants: list[tuple[str, dict[str, Any]]] = [
        ("default", {}),
        ("pin=off", {"ENABLE_CPU_PINNING": False}),
        ("threads=2", {"INFERENCE_NUM_THREADS": 2}),
        ("pin=off threads=2", {"ENABLE_CPU_PINNING": False, "INFERENCE_NUM_THREADS": 2}),
        ("threads=1", {"INFERENCE_NUM_THREADS": 1}),
        ("kv=f16", {"KV_CACHE_PRECISION": "f16"}),
        ("infer=f32", {"INFERENCE_PRECISION_HINT": "f32"}),
        ("dq=off", {"DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}),
        ("dq=128", {"DYNAMIC_QUANTIZATION_GROUP_SIZE": 128}),
        ("attn=SDPA", {"ATTENTION_BACKEND": "SDPA"}),
        (
            "pin=off kv=f16 dq=128",
            {
                "ENABLE_CPU_PINNING": False,
                "KV_CACHE_PRECISION": "f16",
                "DYNAMIC_QUANTIZATION_GROUP_SIZE": 128,
            },
        ),
        ("pin=off dq=128", {"ENABLE_CPU_PINNING": False, "DYNAMIC_QUANTIZATION_GROUP_SIZE": 128}),
    ]
    return [Case(label=label, properties=props) for label, props in variants]


def engine_cases(props: dict[str, Any], scheduler: dict[str, Any]) -> list[Case]:
    """Both pipelines, 1 and 4 concurrent requests, on the IR and on the Q4_0 GGUF."""
    cases = []
    for model in ("ir", "gguf"):
        cases += [
            Case(f"{model} LLMPipeline", model, "llm", 1, props),
            Case(f"{model} CB x1", model, "cb", 1, props, scheduler),
            Case(f"{model} CB x4", model, "cb", 4, props, scheduler),
        ]
    return cases


def scheduler_cases(props: dict[str, Any]) -> list[Case]:
    """``SchedulerConfig`` variants for 4 concurrent requests on the IR (TTFT vs throughput)."""
    base = {"cache_size_gb": 1, "enable_prefix_caching": True}
    variants: list[tuple[str, dict[str, Any]]] = [
        ("split-fuse 256", {"dynamic_split_fuse": True, "max_num_batched_tokens": 256}),
        ("split-fuse 512", {"dynamic_split_fuse": True, "max_num_batched_tokens": 512}),
        ("split-fuse 64", {"dynamic_split_fuse": True, "max_num_batched_tokens": 64}),
        ("no split-fuse 512", {"dynamic_split_fuse": False, "max_num_batched_tokens": 512}),
        (
            "split-fuse 256, no prefix cache",
            {
                "dynamic_split_fuse": True,
                "max_num_batched_tokens": 256,
                "enable_prefix_caching": False,
            },
        ),
    ]
    return [Case(f"CB x4 {label}", "ir", "cb", 4, props, base | sched) for label, sched in variants]


def print_table(results: list[CaseResult], workload: Workload, max_foreign: float) -> None:
    print(
        f"\nprompt {workload.prompt_tokens} tokens, {workload.new_tokens} new tokens, greedy, "
        f"ignore_eos. Medians over the reps during which other processes used <= "
        f"{max_foreign:.0%} of the CPU (n of all); TTFT/decode per request, aggregate per rep."
    )
    print(
        f"{'case':<28} {'n':>5} {'TTFT ms':>8} {'decode t/s':>10} {'aggr t/s':>9} "
        f"{'load s':>7} {'others':>6}"
    )
    for result in results:
        if result.error:
            print(f"{result.case.label:<28} failed: {result.error}")
            continue
        row = result.row(max_foreign)
        print(
            f"{row['case']:<28} {row['n']:>2}/{row['n_all']:<2} {row['ttft_ms']:>8.0f} "
            f"{row['decode_tps']:>10.2f} {row['aggregate_tps']:>9.2f} {row['load_s']:>7.1f} "
            f"{row['foreign_cpu']:>6.0%}"
        )


def save_results(
    layout: CacheLayout,
    plan: str,
    results: list[CaseResult],
    workload: Workload,
    max_foreign: float,
) -> Path:
    out_dir = layout.root / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"raw_genai-{plan}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    payload = {
        "workload": asdict(workload),
        "max_foreign": max_foreign,
        "results": [asdict(r) | {"summary": r.row(max_foreign)} for r in results],
    }
    path.write_text(json.dumps(payload, indent=2))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("plan", choices=["sweep", "engines", "scheduler", "report", "worker"])
    parser.add_argument("spec", nargs="?", help="report: a saved results JSON file")
    parser.add_argument("--prompt-tokens", type=int, default=100)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--reps", type=int, default=3, help="timed generations per process")
    parser.add_argument("--warmup", type=int, default=1, help="untimed generations per process")
    parser.add_argument(
        "--rounds", type=int, default=2, help="fresh processes per case, interleaved"
    )
    parser.add_argument(
        "--props", type=json.loads, default={}, help="engines: CPU properties as JSON"
    )
    parser.add_argument(
        "--scheduler",
        type=json.loads,
        default={"cache_size_gb": 1, "enable_prefix_caching": True, "dynamic_split_fuse": True},
        help="engines: SchedulerConfig settings as JSON (keys of genai_measure.scheduler_config)",
    )
    parser.add_argument("--only", nargs="+", help="run only cases whose label is one of these")
    parser.add_argument(
        "--quiet",
        type=float,
        default=0.25,
        help="before each case, wait (max 3 min) until other processes use <= this CPU share",
    )
    parser.add_argument(
        "--max-foreign",
        type=float,
        default=0.25,
        help="drop reps during which other processes used more than this CPU share",
    )
    args = parser.parse_args(argv)
    setup_logging(args.verbose)

    if args.plan == "worker":
        spec = json.loads(args.spec)
        out = run_case_here(
            Case(**spec["case"]),
            Path(spec["model_path"]),
            Workload(**spec["workload"]),
            spec["salt"],
        )
        print(json.dumps(out))
        return 0

    if args.plan == "report":
        saved = json.loads(Path(args.spec).read_text())
        results = [
            CaseResult(Case(**r["case"]), r["load_s"], r["runs"], r["error"])
            for r in saved["results"]
        ]
        print_table(results, Workload(**saved["workload"]), args.max_foreign)
        return 0

    layout = CacheLayout(args.cache)
    workload = Workload(args.prompt_tokens, args.new_tokens, args.reps, args.warmup)
    if args.plan == "sweep":
        cases = sweep_cases()
    elif args.plan == "engines":
        cases = engine_cases(args.props, args.scheduler)
    else:
        cases = scheduler_cases(args.props)
    if args.only:
        cases = [c for c in cases if c.label in args.only]
    results = run_cases(layout, cases, workload, args.rounds, args.quiet)
    print_table(results, workload, args.max_foreign)
    saved = save_results(layout, args.plan, results, workload, args.max_foreign)
    logger.info("results saved to %s", saved)
    return 0


if __name__ == "__main__":
    sys.exit(main())
