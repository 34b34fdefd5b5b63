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
import sys
from pathlib import Path

from tiny_encoder import bert_tokenizer, bert_wordpiece, export_encoder  # sibling (by path)

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


def build_checkpoint(hf_dir: Path) -> dict[str, str]:
    """Train the tokenizer, make the seeded model, save both; the pooling file to add."""
    import torch
    from tokenizers import trainers
    from transformers import BertConfig, BertModel

    torch.manual_seed(SEED)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    raw = bert_wordpiece()
    raw.train_from_iterator(
        list(CORPUS), trainers.WordPieceTrainer(vocab_size=300, special_tokens=specials)
    )
    bert_tokenizer(raw, SHAPE["max_position_embeddings"]).save_pretrained(str(hf_dir))
    config = BertConfig(vocab_size=raw.get_vocab_size(), **SHAPE)
    BertModel(config).eval().save_pretrained(str(hf_dir), safe_serialization=True)
    pooling = {"word_embedding_dimension": SHAPE["hidden_size"], "pooling_mode_mean_tokens": True}
    return {"1_Pooling/config.json": json.dumps(pooling) + "\n"}


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    export_encoder(build_checkpoint, "feature-extraction", OUTPUT_DIR)
    return 0


if __name__ == "__main__":
    sys.exit(main())
