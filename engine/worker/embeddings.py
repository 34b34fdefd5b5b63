"""Embedding models in the engine worker: GenAI's ``TextEmbeddingPipeline``.

One embedding model is kept loaded beside the chat model (IDE plugins index code with one
while chatting with the other). It is loaded on the first request that names it and replaced
when another is named. ``embed`` runs synchronously on the worker's loop: a batch of short
texts takes milliseconds on an embedding-sized model, and it keeps the one-thread rule.

Threading: used only from the worker's single loop thread.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from engine.models import ModelSpec, read_json

logger = logging.getLogger(__name__)


class EmbeddingRunner:
    """Loads embedding models on demand and embeds texts with them."""

    def __init__(self) -> None:
        self._key: tuple[Path, str] | None = None
        self._pipe: Any = None
        self._tokenizer: Any = None

    def embed(
        self, spec: ModelSpec, device: str, texts: list[str]
    ) -> tuple[list[list[float]], int]:
        """Vectors for ``texts`` and the number of tokens they used.

        Raises:
            Exception: the model cannot be loaded or run (the worker reports the message).
        """
        self._load(spec, device)
        vectors = self._pipe.embed_documents(texts)
        tokens = sum(len(self._tokenizer.encode(text).input_ids.data[0]) for text in texts)
        return [[float(x) for x in vector] for vector in vectors], tokens

    def _load(self, spec: ModelSpec, device: str) -> None:
        import openvino_genai as ov_genai

        key = (spec.path, device)
        if self._key == key:
            return
        self.close()
        config = ov_genai.TextEmbeddingPipeline.Config()
        config.pooling_type = _pooling(spec.path, ov_genai.TextEmbeddingPipeline.PoolingType)
        config.normalize = True
        logger.info("loading embedding model %s on %s", spec.id, device)
        self._pipe = ov_genai.TextEmbeddingPipeline(str(spec.path), device, config)
        self._tokenizer = ov_genai.Tokenizer(str(spec.path))
        self._key = key

    def close(self) -> None:
        self._pipe = self._tokenizer = self._key = None


def _pooling(folder: Path, kinds: Any) -> Any:
    """The pooling a sentence-transformers model declares (CLS when it says nothing)."""
    config = read_json(folder / "1_Pooling" / "config.json")
    if config.get("pooling_mode_mean_tokens"):
        return kinds.MEAN
    if config.get("pooling_mode_lasttoken"):
        return kinds.LAST_TOKEN
    return kinds.CLS
