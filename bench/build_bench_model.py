"""Build the benchmark model: Qwen2.5-0.5B shape, random weights, real tokenizer, three formats.

Why: speed and memory figures are only honest on a realistic shape, and no model hub is
reachable here. Random weights run exactly as fast as trained ones, and with ``ignore_eos``
they generate the requested number of tokens. The tokenizer and chat template are the real
Qwen2 / Qwen2.5 ones, taken from the llama-cpp-python sdist that ``bench.build_llama_cpp``
extracted (``models/ggml-vocab-qwen2.gguf``, ``models/templates/Qwen-Qwen2.5-7B-Instruct.jinja``).

What, into ``CACHE/models/qwen2.5-0.5b-shape-random/``:

- ``hf/``: a transformers checkpoint (bf16 safetensors, seeded random weights, tied
  embeddings, tokenizer with the Qwen2.5 chat template);
- ``ov-int4/``: OpenVINO IR with int4 weights exported by optimum-intel (NNCF data-free
  compression), plus ``openvino_tokenizer.xml`` / ``openvino_detokenizer.xml``;
- ``gguf/model-f16.gguf`` from llama.cpp's ``convert_hf_to_gguf.py`` and
  ``gguf/model-q4_0.gguf`` from ``llama-quantize``. OpenVINO GenAI loads that Q4_0 file
  directly, so llama.cpp and Sidelight can be compared on the very same weights.

torch, optimum-intel and NNCF live in a separate virtual environment (default
``CACHE/venv-bench``; ``--venv`` moves it), which this script creates on first use::

    python -m venv VENV
    VENV/bin/pip install torch==2.13.0 openvino==2026.4.1 openvino-tokenizers==2026.4.1.0 \
        optimum-intel[openvino]==2.2.0 nncf==3.4.0 transformers==5.5.4 ...   # see VENV_REQUIREMENTS
    VENV/bin/pip uninstall -y torchvision   # fails to import beside this torch

openvino and openvino-tokenizers are pinned to the runtime's version so the exported
tokenizer IR matches the one Sidelight loads.

Run (from the repository root, after ``bench.build_llama_cpp``; about 10 minutes on 2 cores)::

    nice -n 10 .venv/bin/python -m bench.build_bench_model [--cache DIR] [--venv DIR] [--force]

Each output is skipped when it already exists; ``--force`` rebuilds all of them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common import CacheLayout, add_common_args, run, setup_logging

logger = logging.getLogger(__name__)

VENV_REQUIREMENTS = (
    "torch==2.13.0",  # installs from a local wheel; a different torch must never be pulled
    "openvino==2026.4.1",
    "openvino-tokenizers==2026.4.1.0",
    "optimum-intel[openvino]==2.2.0",
    "optimum==2.3.0",
    "nncf==3.4.0",
    "transformers==5.5.4",
    "tokenizers==0.22.2",
    "accelerate",
    "safetensors",
    "sentencepiece",
    "gguf",
    "numpy",
)

# Qwen2.5's config.json entries every size shares (bench.matrix adds the other shapes).
QWEN25_COMMON: dict[str, Any] = {
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "tie_word_embeddings": True,
    "use_sliding_window": False,
    "sliding_window": 32768,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "initializer_range": 0.02,
}
# Qwen2.5-0.5B(-Instruct) config.json, minus the weights.
QWEN25_05B_CONFIG: dict[str, Any] = QWEN25_COMMON | {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "max_window_layers": 21,
}
VOCAB_GGUF = "ggml-vocab-qwen2.gguf"
CHAT_TEMPLATE = "Qwen-Qwen2.5-7B-Instruct.jinja"
ENDOFTEXT_ID = 151643
IM_END_ID = 151645


# --- virtual environment -------------------------------------------------------------


def ensure_venv(venv: Path) -> Path:
    """Create the torch/optimum venv once (re-created when the requirements change)."""
    python = venv / "bin" / "python"
    stamp = venv / ".sidelight-bench-requirements"
    wanted = hashlib.sha256("\n".join(VENV_REQUIREMENTS).encode()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    if not python.exists():
        run([sys.executable, "-m", "venv", venv])
    run([python, "-m", "pip", "install", *VENV_REQUIREMENTS])
    # optimum pulls torchvision, which fails to import beside the local torch build.
    run([python, "-m", "pip", "uninstall", "-y", "torchvision"])
    stamp.write_text(wanted)
    return python


# --- a. transformers checkpoint (runs inside the venv) ---------------------------------


def make_hf_checkpoint(llama_src: Path, out_dir: Path, seed: int) -> None:
    """Write the random-weight checkpoint and the real tokenizer to ``out_dir``.

    Must run in the bench venv (imports torch and transformers).
    """
    import torch  # type: ignore[import-not-found]  # bench venv only
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, Qwen2Config  # type: ignore[import-not-found]

    models = llama_src / "models"
    tokenizer = AutoTokenizer.from_pretrained(models, gguf_file=VOCAB_GGUF)
    tokenizer.chat_template = (models / "templates" / CHAT_TEMPLATE).read_text()
    # Qwen2.5-Instruct ends turns with <|im_end|> and pads with <|endoftext|>.
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|endoftext|>"

    config = Qwen2Config(**QWEN25_05B_CONFIG)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.generation_config = GenerationConfig(
        bos_token_id=ENDOFTEXT_ID,
        eos_token_id=[IM_END_ID, ENDOFTEXT_ID],
        pad_token_id=ENDOFTEXT_ID,
    )
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("random %s-parameter model saved", f"{n_params:,}")
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)


# --- b. OpenVINO IR ------------------------------------------------------------------------


def export_openvino(
    venv: Path, hf_dir: Path, out_dir: Path, group_size: int, ratio: float, sym: bool
) -> None:
    """Export int4 OpenVINO IR (with tokenizer IRs) through ``optimum-cli``."""
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    cmd: list[str | Path] = [
        venv / "bin" / "optimum-cli", "export", "openvino",
        "--model", hf_dir,
        "--task", "text-generation-with-past",
        "--weight-format", "int4",
        "--group-size", str(group_size),
        "--ratio", str(ratio),
    ]  # fmt: skip
    if sym:
        cmd.append("--sym")
    run([*cmd, tmp])
    for name in ("openvino_model.xml", "openvino_tokenizer.xml", "openvino_detokenizer.xml"):
        if not (tmp / name).exists():
            raise RuntimeError(f"optimum-cli left no {name} in {tmp}")
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)


# --- c. GGUF -------------------------------------------------------------------------------


def convert_gguf(python: Path, llama_src: Path, hf_dir: Path, f16_out: Path) -> None:
    """Convert the checkpoint to an f16 GGUF with llama.cpp's own converter."""
    f16_out.parent.mkdir(parents=True, exist_ok=True)
    tmp = f16_out.with_suffix(".partial")
    run([python, llama_src / "convert_hf_to_gguf.py", hf_dir, "--outtype", "f16", "--outfile", tmp])
    tmp.rename(f16_out)


def quantize_gguf(quantize_bin: Path, f16_in: Path, out: Path, qtype: str) -> None:
    """Quantize a GGUF with ``llama-quantize`` (default mix: output tensor stays higher precision)."""
    if not quantize_bin.exists():
        raise FileNotFoundError(
            f"{quantize_bin} missing; run `python -m bench.build_llama_cpp` first"
        )
    tmp = out.with_suffix(".partial")
    run([quantize_bin, f16_in, tmp, qtype])
    tmp.rename(out)


def write_manifest(layout: CacheLayout, seed: int, args: argparse.Namespace) -> None:
    manifest = {
        "name": layout.model_dir.name,
        "shape": "Qwen2.5-0.5B",
        "weights": f"random, torch.manual_seed({seed}), bf16",
        "config": QWEN25_05B_CONFIG,
        "tokenizer": VOCAB_GGUF,
        "chat_template": CHAT_TEMPLATE,
        "ov_int4": {"group_size": args.group_size, "ratio": args.ratio, "sym": args.sym},
        "gguf_quant": "Q4_0",
        "files": {
            "hf": str(layout.hf_dir),
            "ov_int4": str(layout.ov_dir),
            "gguf_f16": str(layout.gguf_f16),
            "gguf_q4_0": str(layout.gguf_q4_0),
        },
    }
    (layout.model_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))


def _size_mb(path: Path) -> float:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--venv", type=Path, help="torch/optimum venv (default: CACHE/venv-bench)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--group-size", type=int, default=128, help="int4 group size for the IR")
    parser.add_argument(
        "--ratio", type=float, default=1.0, help="share of int4 (rest int8) layers in the IR"
    )
    parser.add_argument(
        "--sym", action="store_true", help="symmetric int4 for the IR (default: asymmetric)"
    )
    parser.add_argument("--force", action="store_true", help="rebuild every output")
    parser.add_argument(
        "--stage-hf", action="store_true", help=argparse.SUPPRESS
    )  # internal: runs in the venv
    args = parser.parse_args(argv)
    setup_logging(args.verbose)

    layout = CacheLayout(args.cache)
    llama_src = layout.llama_cpp_source()
    if args.stage_hf:
        make_hf_checkpoint(llama_src, layout.hf_dir, args.seed)
        return 0

    venv = args.venv or args.cache / "venv-bench"
    python = ensure_venv(venv)
    layout.model_dir.mkdir(parents=True, exist_ok=True)
    if args.force:
        for path in (layout.hf_dir, layout.ov_dir, layout.gguf_f16, layout.gguf_q4_0):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)

    if not (layout.hf_dir / "config.json").exists():
        fwd = ["--cache", args.cache, "--seed", str(args.seed)] + (["-v"] if args.verbose else [])
        run(
            [python, "-m", "bench.build_bench_model", "--stage-hf", *fwd],
            cwd=Path(__file__).resolve().parents[1],
        )
    if not (layout.ov_dir / "openvino_model.xml").exists():
        export_openvino(venv, layout.hf_dir, layout.ov_dir, args.group_size, args.ratio, args.sym)
    if not layout.gguf_f16.exists():
        convert_gguf(python, llama_src, layout.hf_dir, layout.gguf_f16)
    if not layout.gguf_q4_0.exists():
        quantize_gguf(
            layout.llama_binary("llama-quantize"), layout.gguf_f16, layout.gguf_q4_0, "Q4_0"
        )
    write_manifest(layout, args.seed, args)

    for label, path in (
        ("hf", layout.hf_dir),
        ("ov-int4", layout.ov_dir),
        ("gguf-f16", layout.gguf_f16),
        ("gguf-q4_0", layout.gguf_q4_0),
    ):
        print(f"{label}\t{_size_mb(path):8.1f} MB\t{path}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except subprocess.CalledProcessError as exc:
        logger.error("command failed with exit code %s", exc.returncode)
        sys.exit(1)
