"""Build the random-weight model ``bench/workloads.py`` measures the code-rewrite row on.

Why: the tiny trained models decode thousands of tokens a second, so through HTTP their
time is all overhead; the 0.5B bench model (``build_bench_model.py``) takes ~10 minutes to
build. This one is in between and builds in about a minute: Qwen2 layout (hidden 896, 12
layers, 14 heads, 2 KV heads, context 4096), random weights (seed 0), the demo model's
931-token tokenizer. Outputs, under ``OUT`` (default ``/tmp/sidelight-workload-model``):
``ov/`` (int8 IR, optimum-intel) and ``rand-q8_0.gguf`` (the same weights, llama.cpp's
converter from the source ``build_llama_cpp.py`` extracted).

Run (the torch/optimum interpreter, from the repository root)::

    .venv-convert/bin/python -m bench.build_workload_model --llama-cpp CACHE/src/llama_cpp_python-*/vendor/llama.cpp
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "resources" / "models" / "sidelight-demo"
SHAPE = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 12,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "layer_types": ["full_attention"] * 12,
    "max_position_embeddings": 4096,
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")
OV_TOKENIZER_FILES = (
    "openvino_tokenizer.xml",
    "openvino_tokenizer.bin",
    "openvino_detokenizer.xml",
    "openvino_detokenizer.bin",
)
# llama.cpp's converter does not know this tokenizer's pre-tokenizer hash (its regex is
# Qwen2's), and Qwen2's set_vocab tries sentencepiece first.
_GGUF_WRAPPER = """
import sys
llama_cpp, model_dir, outfile = sys.argv[1:4]
sys.path.insert(0, llama_cpp + "/gguf-py")
sys.path.insert(0, llama_cpp)
import conversion.base
conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
import convert_hf_to_gguf
import conversion.qwen
conversion.qwen.Qwen2Model.set_vocab = lambda self: self._set_vocab_gpt2()
sys.argv = ["convert_hf_to_gguf.py", model_dir, "--outfile", outfile, "--outtype", "q8_0"]
convert_hf_to_gguf.main()
"""


def build(out: Path, llama_cpp: Path | None) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hf, ov = out / "hf", out / "ov"
    config = json.loads((DEMO / "config.json").read_text())
    config.update(SHAPE)
    torch.manual_seed(0)
    Qwen2ForCausalLM(Qwen2Config(**config)).eval().save_pretrained(hf)
    for name in TOKENIZER_FILES:
        shutil.copy2(DEMO / name, hf / name)
    cli = Path(sys.executable).with_name("optimum-cli")
    subprocess.run(
        [str(cli), "export", "openvino", "--model", str(hf), "--task",
         "text-generation-with-past", "--weight-format", "int8", str(ov)],
        check=True,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )  # fmt: skip
    for name in TOKENIZER_FILES + OV_TOKENIZER_FILES:
        shutil.copy2(DEMO / name, ov / name)
    if llama_cpp is not None:
        command = [sys.executable, "-c", _GGUF_WRAPPER, str(llama_cpp), str(hf)]
        subprocess.run([*command, str(out / "rand-q8_0.gguf")], check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/sidelight-workload-model"))
    parser.add_argument("--llama-cpp", type=Path, help="llama.cpp source (for the GGUF)")
    args = parser.parse_args(argv)
    build(args.out, args.llama_cpp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
