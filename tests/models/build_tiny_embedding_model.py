"""Build the tiny embedding model used by the ``/v1/embeddings`` tests.

What it builds
--------------
A BERT-architecture encoder (hidden 32, 2 layers, 2 heads, random seeded weights) with a small
WordPiece tokenizer trained on a handful of sentences, exported by optimum-intel
(``--task feature-extraction``) to OpenVINO IR with its tokenizer converted by
openvino-tokenizers, into ``tests/fixtures/tiny-embed/`` (well under 2 MB, committed).

A ``1_Pooling/config.json`` in the sentence-transformers layout says "mean pooling", so the
fixture also exercises how Sidelight picks the pooling of an embedding model.

Why
---
Embeddings need no training to be tested: the vectors only have to be deterministic, of the
model's width, normalised and different for different texts. The hub is not reachable, so
the model is made here.

How to rerun
------------
With the build venv described in ``tests/models/build_tiny_model.py``::

    nice -n 19 /work/venv-build/bin/python tests/models/build_tiny_embedding_model.py
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path

from build_tiny_model import export_openvino  # the sibling script (run by path)

LOG = logging.getLogger("build_tiny_embedding_model")

REPO_ROOT = Path(__file__).resolve().parents[2]
OUTPUT_DIR = REPO_ROOT / "tests" / "fixtures" / "tiny-embed"
SEED = 20260612
CORPUS = (
    "Sidelight serves local models on Intel laptops.",
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings turn text into vectors for code search.",
    "def add(a, b): return a + b",
    "OpenVINO runs on the CPU, the GPU and the NPU.",
    "Hello world",
)
SHAPE = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 128,
}
SHIPPED_FILES = (
    "openvino_model.xml",
    "openvino_model.bin",
    "openvino_tokenizer.xml",
    "openvino_tokenizer.bin",
    "openvino_detokenizer.xml",
    "openvino_detokenizer.bin",
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)


def build_checkpoint(hf_dir: Path) -> None:
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import BertConfig, BertModel, BertTokenizerFast

    torch.manual_seed(SEED)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    raw = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    raw.normalizer = normalizers.BertNormalizer(lowercase=True)
    raw.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    raw.train_from_iterator(
        list(CORPUS), trainers.WordPieceTrainer(vocab_size=300, special_tokens=specials)
    )
    tokenizer = BertTokenizerFast(
        tokenizer_object=raw, model_max_length=SHAPE["max_position_embeddings"]
    )
    tokenizer.save_pretrained(str(hf_dir))
    config = BertConfig(vocab_size=raw.get_vocab_size(), **SHAPE)
    BertModel(config).eval().save_pretrained(str(hf_dir), safe_serialization=True)


def install(ov_dir: Path, out_dir: Path) -> None:
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    for name in SHIPPED_FILES:
        if (ov_dir / name).exists():
            shutil.copy2(ov_dir / name, out_dir / name)
    pooling = out_dir / "1_Pooling"
    pooling.mkdir()
    (pooling / "config.json").write_text(
        json.dumps(
            {"word_embedding_dimension": SHAPE["hidden_size"], "pooling_mode_mean_tokens": True}
        )
        + "\n"
    )
    total = sum(p.stat().st_size for p in out_dir.rglob("*") if p.is_file())
    LOG.info("installed %s (%.2f MB)", out_dir.relative_to(REPO_ROOT), total / 1e6)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="tiny-embed-") as tmp:
        hf_dir, ov_dir = Path(tmp) / "hf", Path(tmp) / "ov"
        build_checkpoint(hf_dir)
        export_openvino(hf_dir, ov_dir, task="feature-extraction")
        install(ov_dir, OUTPUT_DIR)
    return 0


if __name__ == "__main__":
    sys.exit(main())
