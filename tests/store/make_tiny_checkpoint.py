"""Write a tiny random Qwen2 transformers checkpoint (the conversion tests' source model).

Run with the conversion interpreter (it needs torch and transformers)::

    .venv-convert/bin/python tests/store/make_tiny_checkpoint.py OUT_DIR [--broken]

The model has the demo model's tokenizer (byte-level BPE with the Qwen2.5 chat template,
copied from ``resources/models/sidelight-demo``) and random weights: hidden 128 (so int4
groups of 128 apply), 2 layers, about 0.4 M parameters. ``--broken`` writes a checkpoint
whose weights file is truncated, so a conversion of it fails inside optimum.
``--reranker`` writes a cross-encoder instead: a random BERT sequence classifier with one
label and the tiny reranker fixture's tokenizer (``tests/fixtures/tiny-rerank``).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from transformers import BertConfig, BertForSequenceClassification, Qwen2Config, Qwen2ForCausalLM

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "resources" / "models" / "sidelight-demo"
TINY_RERANK = ROOT / "tests" / "fixtures" / "tiny-rerank"


def write_reranker(out: Path) -> None:
    torch.manual_seed(0)
    vocab = len(json.loads((TINY_RERANK / "tokenizer.json").read_text())["model"]["vocab"])
    config = BertConfig(
        vocab_size=vocab,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=128,
        num_labels=1,
    )
    out.mkdir(parents=True, exist_ok=True)
    BertForSequenceClassification(config).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TINY_RERANK / name, out / name)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--broken", action="store_true")
    parser.add_argument("--reranker", action="store_true")
    args = parser.parse_args()
    if args.reranker:
        write_reranker(args.out)
        print(f"wrote {args.out}")
        return
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=931,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=924,
        eos_token_id=926,
        pad_token_id=924,
    )
    model = Qwen2ForCausalLM(config)
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(DEMO / name, args.out / name)
    if args.broken:
        weights = args.out / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:1000])
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
