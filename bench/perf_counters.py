"""Where a decode step's time goes: OpenVINO CPU perf counters of one token, by node type.

Why: when GenAI decodes slower than llama.cpp on the same weights, the question is whether
the int4 matmuls (weight bandwidth), attention, or everything else (small ops, framework
overhead) takes the time. ``PERF_COUNT`` makes the CPU plugin time every node.

What: compiles an IR folder's ``openvino_model.xml`` (stateful, as optimum exports it) with
``PERF_COUNT`` and the engine's properties, runs a short prompt and ``--steps`` single-token
steps, and prints the per-node-type share of the last steps' node time plus wall time per
step (the gap between wall and node time is plugin/graph overhead outside the nodes).

Run from the repository root in the runtime venv::

    .venv/bin/python -m bench.perf_counters CACHE/matrix/qwen2.5-0.5b-shape-random/ov-g128-asym-head8
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import openvino as ov

from bench.common import cpu_summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path, help="IR folders")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args(argv)
    print(f"Machine: {cpu_summary()}")
    core = ov.Core()
    for folder in args.models:
        compiled = core.compile_model(
            folder / "openvino_model.xml",
            "CPU",
            {"PERF_COUNT": True, "ENABLE_CPU_PINNING": False},
        )
        request = compiled.create_infer_request()
        names = {p.get_any_name() for p in compiled.inputs}
        ids = list(range(1000, 1032))

        def feed(
            tokens: list[int],
            start: int,
            request: ov.InferRequest = request,
            names: set[str] = names,
        ) -> int:
            n = len(tokens)
            inputs = {
                "input_ids": np.asarray([tokens], dtype=np.int64),
                "attention_mask": np.ones((1, start + n), dtype=np.int64),
                "position_ids": np.arange(start, start + n, dtype=np.int64)[None, :],
                "beam_idx": np.zeros((1,), dtype=np.int32),
            }
            result = request.infer({k: v for k, v in inputs.items() if k in names})
            return int(np.asarray(result["logits"])[0, -1].argmax())

        request.reset_state()
        token, pos = feed(ids, 0), len(ids)
        by_type: dict[str, float] = defaultdict(float)
        wall, measured = 0.0, 0
        for step in range(args.steps):
            t0 = time.perf_counter()
            token = feed([token], pos)
            dt = time.perf_counter() - t0
            pos += 1
            if step < args.steps // 2:
                continue  # warm-up half
            wall += dt
            measured += 1
            for info in request.profiling_info:
                by_type[f"{info.node_type} ({info.exec_type})"] += info.real_time.total_seconds()
        node_total = sum(by_type.values())
        print(f"\n{folder.name}: {measured} steps, wall {wall / measured * 1000:.2f} ms/token, "
              f"node time {node_total / measured * 1000:.2f} ms/token")  # fmt: skip
        for name, seconds in sorted(by_type.items(), key=lambda kv: -kv[1])[: args.top]:
            print(f"  {seconds / node_total:6.1%}  {seconds / measured * 1000:7.3f} ms  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
