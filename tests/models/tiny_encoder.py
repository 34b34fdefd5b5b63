"""What the tiny encoder builders share (``build_tiny_embedding_model.py``,
``build_tiny_rerank_model.py``): a BERT WordPiece tokenizer, and the export of a checkpoint
to OpenVINO IR installed as a committed fixture folder.

Run by path from the conversion venv like its siblings (see ``build_tiny_model.py``);
imports of torch, tokenizers and transformers are deferred to the functions using them.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from build_tiny_model import REPO_ROOT, export_openvino  # the sibling script (run by path)
from build_tiny_model import SHIPPED_FILES as DECODER_FILES

LOG = logging.getLogger("tiny_encoder")

# The demo model's files (IR, converted tokenizer, config, tokenizer files) but for the
# generation config an encoder has none of, plus the special tokens map. A file optimum did
# not write is skipped.
SHIPPED_FILES = (
    *(name for name in DECODER_FILES if name != "generation_config.json"),
    "special_tokens_map.json",
)


def bert_wordpiece(vocab: dict[str, int] | None = None) -> Any:
    """A WordPiece ``tokenizers.Tokenizer`` with BERT's lowercasing normaliser and
    pre-tokenizer; untrained when ``vocab`` is None (train it before wrapping it)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    raw = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    raw.normalizer = normalizers.BertNormalizer(lowercase=True)
    raw.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return raw


def bert_tokenizer(raw: Any, max_length: int) -> Any:
    """``raw`` as a transformers ``BertTokenizerFast`` (what ``save_pretrained`` writes)."""
    from transformers import BertTokenizerFast

    return BertTokenizerFast(tokenizer_object=raw, model_max_length=max_length)


def export_encoder(build: Callable[[Path], dict[str, str]], task: str, out_dir: Path) -> None:
    """Build a checkpoint, export it to IR (optimum-intel ``--task task``), install it.

    ``build(hf_dir)`` saves the checkpoint and tokenizer into ``hf_dir`` and returns extra
    files for the fixture (path relative to it -> text). ``out_dir`` is replaced by the
    shipped files and those extras.
    """
    with tempfile.TemporaryDirectory(prefix=f"{out_dir.name}-") as tmp:
        hf_dir, ov_dir = Path(tmp) / "hf", Path(tmp) / "ov"
        extras = build(hf_dir)
        export_openvino(hf_dir, ov_dir, task=task)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        out_dir.mkdir(parents=True)
        for name in SHIPPED_FILES:
            if (ov_dir / name).exists():
                shutil.copy2(ov_dir / name, out_dir / name)
    for relative, text in extras.items():
        (out_dir / relative).parent.mkdir(parents=True, exist_ok=True)
        (out_dir / relative).write_text(text)
    total = sum(p.stat().st_size for p in out_dir.rglob("*") if p.is_file())
    LOG.info("installed %s (%.2f MB)", out_dir.relative_to(REPO_ROOT), total / 1e6)
