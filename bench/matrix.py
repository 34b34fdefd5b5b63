"""Benchmark matrix: model shapes x export recipes x CPU properties x pipelines, vs llama.cpp.

Why: the export recipe alone moves single-stream decode by up to 1.5x (issue 13), and the
CPU plugin properties and the pipeline move it further. Picking the product's defaults
needs all of them measured on the same machine, in one run, next to llama.cpp's Q4_0 and
Q4_K_M of the very same weights.

What, per shape (Qwen2.5 0.5B / 1.5B / 3B / 7B dimensions, random weights, real Qwen2
tokenizer and chat template; random weights decode exactly as fast as trained ones):

1. ``build``: a bf16 transformers checkpoint (seeded random weights), an fp16 OpenVINO IR
   exported once by optimum-intel, then one IR per export recipe compressed from that fp16
   IR with NNCF's data-free ``compress_weights`` (what ``optimum-cli --weight-format int4``
   runs, without re-tracing the model each time), an f16 GGUF (llama.cpp's converter) and
   Q4_0 / Q4_K_M GGUFs (``llama-quantize``). Runs in the torch/optimum venv (``--venv``).
2. ``run``: every GenAI case (recipe x properties x pipeline) in a fresh process, and
   ``llama-bench`` tg on each GGUF, in ``--rounds`` interleaved rounds; medians; each row's
   ratio to llama.cpp Q4_0 of the same shape; the 1-minute load average next to each figure
   (the machine is shared).

AWQ and scale estimation need calibration text run through the model; NNCF can take any
dataset, but on random weights the result is meaningless for accuracy and the speed of the
resulting IR is that of the plain recipe with the same group size (same int4 layout), so the
matrix leaves them out; ``bench.quality`` covers accuracy on trained models.

Run from the repository root (``--quick``: the 0.5B shape, five recipes, two property sets,
``LLMPipeline`` only)::

    .venv/bin/python -m bench.matrix build --shape 0.5b [--recipes ...]
    .venv/bin/python -m bench.matrix run --quick
    .venv/bin/python -m bench.matrix run --shape 1.5b --rounds 3

``--cache`` (or ``SIDELIGHT_BENCH_CACHE``) must hold ``bench.build_llama_cpp``'s source and
build; large outputs go to ``CACHE/matrix/``. ``run --no-amx`` times llama.cpp with the
build whose AMX kernels are compiled out (``bench.build_llama_cpp --no-amx``): on a CPU
with AMX the native build crashes on its repacked weights.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.build_bench_model import QWEN25_COMMON
from bench.common import CacheLayout, add_common_args, add_no_amx_arg, median, run, setup_logging

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]

# Qwen2.5 configs (config.json of the Instruct models) minus the weights.
SHAPES: dict[str, dict[str, Any]] = {
    "0.5b": QWEN25_COMMON
    | {
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
    },
    "1.5b": QWEN25_COMMON
    | {
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
    },
    "3b": QWEN25_COMMON
    | {
        "hidden_size": 2048,
        "intermediate_size": 11008,
        "num_hidden_layers": 36,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
    },
    "7b": QWEN25_COMMON
    | {
        "vocab_size": 152064,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "tie_word_embeddings": False,
    },
}
# Parameters in billions, for the memory check before building.
SHAPE_PARAMS_B = {"0.5b": 0.49, "1.5b": 1.54, "3b": 3.09, "7b": 7.6}


@dataclass(frozen=True)
class Recipe:
    """One weight-compression recipe (NNCF ``compress_weights`` arguments)."""

    name: str
    mode: str  # "int4_sym", "int4_asym", "int8_asym"
    group_size: int = 128  # -1: channel-wise
    all_layers: bool = False  # False: embeddings and head stay int8 (optimum's default)
    awq: bool = False  # data-free AWQ (no dataset: NNCF's weight-only variant)

    def nncf_kwargs(self) -> dict[str, Any]:
        if self.mode.startswith("int8"):
            return {"mode": self.mode}
        kwargs: dict[str, Any] = {
            "mode": self.mode,
            "group_size": self.group_size,
            "ratio": 1.0,
            "all_layers": self.all_layers,
        }
        if self.awq:
            kwargs["awq"] = True
        return kwargs


RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe("g128-asym-head8", "int4_asym", 128),  # optimum-cli int4 default
        Recipe("g128-sym-head8", "int4_sym", 128),
        Recipe("g128-asym-all", "int4_asym", 128, True),
        Recipe("g128-sym-all", "int4_sym", 128, True),
        Recipe("g64-sym-all", "int4_sym", 64, True),
        Recipe("g64-asym-head8", "int4_asym", 64),
        Recipe("g64-sym-head8", "int4_sym", 64),
        Recipe("g64-asym-all", "int4_asym", 64, True),
        Recipe("g64-sym-all-awq", "int4_sym", 64, True, awq=True),
        Recipe("g32-sym-all", "int4_sym", 32, True),
        Recipe("cw-sym-all", "int4_sym", -1, True),  # the NPU recipe
        Recipe("cw-sym-head8", "int4_sym", -1),
        Recipe("cw-asym-all", "int4_asym", -1, True),
        Recipe("int8", "int8_asym"),
        Recipe("int8-sym", "int8_sym"),
    )
}
QUICK_RECIPES = ("g128-asym-head8", "g128-sym-all", "g64-sym-all", "cw-sym-all", "int8")

# CPU plugin property sets; every set has pinning off (the engine's default).
PROPS: dict[str, dict[str, Any]] = {
    "engine": {"ENABLE_CPU_PINNING": False},
    "t2": {"ENABLE_CPU_PINNING": False, "INFERENCE_NUM_THREADS": 2},
    "t1": {"ENABLE_CPU_PINNING": False, "INFERENCE_NUM_THREADS": 1},
    "kv-f16": {"ENABLE_CPU_PINNING": False, "KV_CACHE_PRECISION": "f16"},
    "dq128": {"ENABLE_CPU_PINNING": False, "DYNAMIC_QUANTIZATION_GROUP_SIZE": 128},
    "dq-off": {"ENABLE_CPU_PINNING": False, "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0},
    "latency": {"ENABLE_CPU_PINNING": False, "PERFORMANCE_HINT": "LATENCY"},
    "throughput": {"ENABLE_CPU_PINNING": False, "PERFORMANCE_HINT": "THROUGHPUT"},
    # On CPUs with AVX-512 bf16 or AMX, OpenVINO infers in bf16 by default, and its CPU
    # plugin then skips dynamic quantization (the int8 VNNI path for int4/int8 weights needs
    # f32 activations); f32 turns that path back on. Elsewhere f32 is already the default.
    "f32": {"ENABLE_CPU_PINNING": False, "INFERENCE_PRECISION_HINT": "f32"},
}
QUICK_PROPS = ("engine", "kv-f16")
GGUF_QUANTS = ("Q4_0", "Q4_K_M")


@dataclass(frozen=True)
class ShapeLayout:
    root: Path  # CACHE/matrix/<shape>

    @property
    def hf(self) -> Path:
        return self.root / "hf"

    @property
    def fp16(self) -> Path:
        return self.root / "ov-fp16"

    def ir(self, recipe: str) -> Path:
        return self.root / f"ov-{recipe}"

    @property
    def gguf_f16(self) -> Path:
        return self.root / "gguf" / "model-f16.gguf"

    def gguf(self, quant: str) -> Path:
        return self.root / "gguf" / f"model-{quant.lower()}.gguf"


def shape_layout(cache: Path, shape: str) -> ShapeLayout:
    return ShapeLayout(cache / "matrix" / f"qwen2.5-{shape}-shape-random")


# --- build (stages marked "venv" run in the torch/optimum interpreter) ----------------------


def _venv_env(layout: CacheLayout) -> dict[str, str]:
    """Environment for the venv stages: the repo and ``gguf`` (``SIDELIGHT_BENCH_GGUF_PATH``).

    transformers reads the Qwen2 vocabulary from a GGUF file and needs an installed ``gguf``
    package (with metadata) for it; a torch venv without one can get it with
    ``pip install --target DIR gguf`` and ``SIDELIGHT_BENCH_GGUF_PATH=DIR``.
    """
    extra = os.environ.get("SIDELIGHT_BENCH_GGUF_PATH", "")
    parts = (extra, str(REPO_ROOT), os.environ.get("PYTHONPATH", ""))
    path = os.pathsep.join(p for p in parts if p)
    return {**os.environ, "PYTHONPATH": path, "TOKENIZERS_PARALLELISM": "false"}


def stage_hf(llama_src: Path, shape: str, out_dir: Path, seed: int) -> None:
    """venv: write the random-weight checkpoint with the real Qwen2 tokenizer and template."""
    import torch  # type: ignore[import-not-found]  # venv only
    from transformers import (  # type: ignore[import-not-found]  # venv only
        AutoModelForCausalLM,
        AutoTokenizer,
        GenerationConfig,
        Qwen2Config,
    )

    from bench.build_bench_model import CHAT_TEMPLATE, ENDOFTEXT_ID, IM_END_ID, VOCAB_GGUF

    models = llama_src / "models"
    tokenizer = AutoTokenizer.from_pretrained(models, gguf_file=VOCAB_GGUF)
    tokenizer.chat_template = (models / "templates" / CHAT_TEMPLATE).read_text()
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|endoftext|>"
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(Qwen2Config(**SHAPES[shape]), dtype=torch.bfloat16)
    model.generation_config = GenerationConfig(
        bos_token_id=ENDOFTEXT_ID, eos_token_id=[IM_END_ID, ENDOFTEXT_ID], pad_token_id=ENDOFTEXT_ID
    )
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.rename(out_dir)


def stage_compress(fp16_dir: Path, out_dir: Path, recipe: Recipe) -> None:
    """venv: compress the fp16 IR's weights with NNCF (data-free), copy the tokenizer IRs."""
    import nncf  # type: ignore[import-not-found]  # venv only
    import openvino as ov

    core = ov.Core()
    model = core.read_model(fp16_dir / "openvino_model.xml")
    kwargs = recipe.nncf_kwargs()
    kwargs["mode"] = getattr(nncf.CompressWeightsMode, kwargs["mode"].upper())
    compressed = nncf.compress_weights(model, **kwargs)
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(fp16_dir, tmp, ignore=shutil.ignore_patterns("openvino_model.*"))
    ov.save_model(compressed, tmp / "openvino_model.xml", compress_to_fp16=False)
    (tmp / "sidelight_recipe.json").write_text(json.dumps(asdict(recipe)))
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)


def build(args: argparse.Namespace, layout: CacheLayout, shape: str, recipes: list[str]) -> None:
    """Make every missing artefact of one shape (idempotent)."""
    import psutil

    sl = shape_layout(args.cache, shape)
    sl.root.mkdir(parents=True, exist_ok=True)
    venv_python = args.venv
    env = _venv_env(layout)
    need_gb = SHAPE_PARAMS_B[shape] * 2 * 2.5 + 1  # bf16 weights, export holds ~2.5x
    have_gb = psutil.virtual_memory().available / 1e9
    if need_gb > have_gb and not args.force:
        raise SystemExit(
            f"{shape}: building needs about {need_gb:.0f} GB of free memory, {have_gb:.0f} GB "
            "is free (pass --force to try anyway)"
        )
    me = [venv_python, "-m", "bench.matrix", "--cache", args.cache]
    if not (sl.hf / "config.json").exists():
        run([*me, "stage-hf", "--shape", shape], cwd=REPO_ROOT, env=env)
    if not (sl.fp16 / "openvino_model.xml").exists():
        tmp = sl.fp16.with_name(sl.fp16.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        optimum = Path(venv_python).with_name("optimum-cli")
        run(
            [optimum, "export", "openvino", "--model", sl.hf, "--task",
             "text-generation-with-past", "--weight-format", "fp16", tmp],
            env=env,
        )  # fmt: skip
        tmp.rename(sl.fp16)
    for name in recipes:
        if not (sl.ir(name) / "openvino_model.xml").exists():
            run(
                [*me, "stage-compress", "--shape", shape, "--recipes", name], cwd=REPO_ROOT, env=env
            )
    if not sl.gguf_f16.exists():
        sl.gguf_f16.parent.mkdir(parents=True, exist_ok=True)
        tmp_gguf = sl.gguf_f16.with_suffix(".partial")
        converter = layout.llama_cpp_source() / "convert_hf_to_gguf.py"
        run([venv_python, converter, sl.hf, "--outtype", "f16", "--outfile", tmp_gguf], env=env)
        tmp_gguf.rename(sl.gguf_f16)
    for quant in GGUF_QUANTS:
        if not sl.gguf(quant).exists():
            tmp_q = sl.gguf(quant).with_suffix(".partial")
            run([layout.llama_binary("llama-quantize"), sl.gguf_f16, tmp_q, quant])
            tmp_q.rename(sl.gguf(quant))


# --- run -------------------------------------------------------------------------------------


@dataclass
class Row:
    """One measured configuration and its repetitions across rounds."""

    shape: str
    kind: str  # "genai" or "llama.cpp"
    label: str
    model: str
    pipeline: str = ""
    props: str = ""
    threads: int = 0  # llama-bench's -t (llama.cpp rows)
    decode: list[float] = field(default_factory=list)
    ttft_ms: list[float] = field(default_factory=list)
    load1: list[float] = field(default_factory=list)
    others: list[float] = field(default_factory=list)  # CPU share other processes used
    error: str | None = None


def plan_rows(args: argparse.Namespace, shapes: list[str]) -> list[Row]:
    rows: list[Row] = []
    for shape in shapes:
        sl = shape_layout(args.cache, shape)
        for quant in GGUF_QUANTS:
            if sl.gguf(quant).exists():
                for threads in args.threads:
                    label, model = f"llama.cpp {quant}", str(sl.gguf(quant))
                    rows.append(Row(shape, "llama.cpp", label, model, threads=threads))
        for recipe in args.recipes:
            if not (sl.ir(recipe) / "openvino_model.xml").exists():
                logger.warning("%s %s not built; skipped", shape, recipe)
                continue
            for props in args.props:
                for pipeline in args.pipelines:
                    rows.append(Row(shape, "genai", recipe, str(sl.ir(recipe)), pipeline, props))
    return rows


def measure_row(row: Row, args: argparse.Namespace, layout: CacheLayout, rnd: int) -> None:
    # Imported here: the build stages run in the torch venv, which lacks the runtime's deps.
    from bench.llama_cpp import run_llama_bench
    from bench.raw_genai import Case, Workload, run_case_subprocess

    load1 = os.getloadavg()[0]
    if row.kind == "llama.cpp":
        try:
            res = run_llama_bench(
                layout.llama_binary("llama-bench", no_amx=args.no_amx), Path(row.model),
                args.prompt_tokens, args.new_tokens, row.threads, args.reps,
            )  # fmt: skip
        except subprocess.CalledProcessError as exc:
            row.error = f"llama-bench exited with {exc.returncode}"
            return
        row.decode.append(res.tg_tps)
        row.ttft_ms.append(res.ttft_ms_estimate)
        row.others.append(res.foreign_cpu)
    else:
        case = Case(
            label=f"{row.shape} {row.label} {row.props} {row.pipeline}",
            model=row.model,
            pipeline=row.pipeline,
            properties=PROPS[row.props],
        )
        workload = Workload(args.prompt_tokens, args.new_tokens, args.reps, warmup=1)
        out = run_case_subprocess(case, Path(row.model), workload, f"m{rnd}")
        if "error" in out:
            row.error = str(out["error"])
            return
        for run_ in out["runs"]:
            req = run_["requests"][0]
            row.decode.append(float(req["decode_tps"]))
            row.ttft_ms.append(float(req["ttft_ms"]))
            row.others.append(float(run_["extra"]["foreign_cpu"]))
    row.load1.append(load1)
    logger.info(
        "%s %s %s %s: decode %.1f tok/s (load %.2f)",
        row.shape, row.label, row.props, row.pipeline, row.decode[-1] if row.decode else 0, load1,
    )  # fmt: skip


def print_table(rows: list[Row], args: argparse.Namespace) -> None:
    from bench.common import cpu_summary

    print(f"\nMachine: {cpu_summary()}")
    print(
        f"\n{args.prompt_tokens}-token prompt, {args.new_tokens} new tokens, greedy; medians over "
        f"{args.rounds} interleaved rounds x {args.reps} reps; load = 1-min load average "
        "(median) when each measurement started; others = CPU share other processes used; "
        "ratio = decode / llama.cpp Q4_0 (same shape) at its fastest thread count"
    )
    print("| shape | weights | props | pipeline | decode tok/s | ratio | TTFT ms | load | others |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    ref: dict[str, float] = {}
    for row in rows:
        if row.kind == "llama.cpp" and row.label.endswith("Q4_0") and row.decode:
            ref[row.shape] = max(ref.get(row.shape, 0.0), median(row.decode))
    for row in rows:
        if row.error or not row.decode:
            print(
                f"| {row.shape} | {row.label} | {row.props} | {row.pipeline} | failed: {row.error} | | | |"
            )
            continue
        dec = median(row.decode)
        ratio = dec / ref[row.shape] if row.shape in ref else float("nan")
        ttft = median(row.ttft_ms)
        ttft_note = " (pp est.)" if row.kind == "llama.cpp" else ""
        props = row.props or f"{row.threads} thread{'s' if row.threads > 1 else ''}"
        print(
            f"| {row.shape} | {row.label} | {props} | {row.pipeline or 'llama-bench'} "
            f"| {dec:.1f} | {ratio:.2f}x | {ttft:.0f}{ttft_note} | {median(row.load1):.2f} "
            f"| {median(row.others):.0%} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("plan", choices=["build", "run", "stage-hf", "stage-compress"])
    parser.add_argument("--shape", nargs="+", choices=list(SHAPES), default=["0.5b"])
    parser.add_argument("--recipes", nargs="+", choices=list(RECIPES), default=list(RECIPES))
    parser.add_argument("--props", nargs="+", choices=list(PROPS), default=list(PROPS))
    parser.add_argument("--pipelines", nargs="+", choices=["llm", "cb"], default=["llm", "cb"])
    parser.add_argument(
        "--quick", action="store_true", help="0.5B, 5 recipes, 2 property sets, LLMPipeline"
    )
    parser.add_argument(
        "--venv",
        type=Path,
        default=REPO_ROOT / ".venv-convert" / "bin" / "python",
        help="build: the torch/optimum-intel interpreter (default: .venv-convert)",
    )
    parser.add_argument("--seed", type=int, default=0)
    add_no_amx_arg(parser, "run: llama-bench")
    parser.add_argument("--force", action="store_true", help="build even if memory looks short")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=[2],
        help="llama-bench threads; several give one llama.cpp row each (ratios use the fastest)",
    )
    parser.add_argument("--prompt-tokens", type=int, default=100)
    parser.add_argument("--new-tokens", type=int, default=64)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    if args.quick:
        args.shape, args.recipes = ["0.5b"], list(QUICK_RECIPES)
        args.props, args.pipelines = list(QUICK_PROPS), ["llm"]
    layout = CacheLayout(args.cache)

    if args.plan == "stage-hf":
        stage_hf(
            layout.llama_cpp_source(),
            args.shape[0],
            shape_layout(args.cache, args.shape[0]).hf,
            args.seed,
        )
        return 0
    if args.plan == "stage-compress":
        sl = shape_layout(args.cache, args.shape[0])
        for name in args.recipes:
            stage_compress(sl.fp16, sl.ir(name), RECIPES[name])
        return 0
    if args.plan == "build":
        for shape in args.shape:
            build(args, layout, shape, args.recipes)
        return 0

    rows = plan_rows(args, args.shape)
    for rnd in range(args.rounds):
        order = rows if rnd % 2 == 0 else list(reversed(rows))
        for row in order:
            if row.error is None:
                measure_row(row, args, layout, rnd)
    print_table(rows, args)
    out = args.cache / "results" / f"matrix-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    logger.info("results saved to %s", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
