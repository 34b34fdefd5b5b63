"""Embedding models in the engine worker: GenAI's ``TextEmbeddingPipeline``.

One embedding model is kept loaded beside the chat model (IDE plugins index code with one
while chatting with the other). It is loaded on the first request that names it and replaced
when another is named. Embedding runs on the worker's loop (the one-thread rule), a chunk at
a time: an indexer's batch of thousands of texts would otherwise hold the loop for a minute
while every chat stream waits. Each chunk is sized to take about
:data:`CHUNK_TARGET_SECONDS`, from the time the previous chunks took, so chat steps run in
between on any model and machine.

Threading: used only from the worker's single loop thread.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.models import ModelSpec, read_json

logger = logging.getLogger(__name__)

CHUNK_TARGET_SECONDS = 0.05
FIRST_CHUNK = 8
MAX_CHUNK = 256


@dataclass
class EmbedJob:
    """One Embed request being worked through, chunk by chunk."""

    request_id: int
    spec: ModelSpec
    device: str
    texts: tuple[str, ...]
    vectors: list[list[float]] = field(default_factory=list)
    tokens: int = 0

    @property
    def done(self) -> bool:
        return len(self.vectors) >= len(self.texts)


class EmbeddingRunner:
    """Loads embedding models on demand and embeds texts with them."""

    def __init__(self) -> None:
        self._key: tuple[Path, str] | None = None
        self._pipe: Any = None
        self._tokenizer: Any = None
        self._seconds_per_text: float | None = None  # measured on the loaded model

    def embed(
        self, spec: ModelSpec, device: str, texts: list[str]
    ) -> tuple[list[list[float]], int]:
        """Vectors for ``texts`` and the number of tokens they used, in one go.

        Raises:
            Exception: the model cannot be loaded or run (the worker reports the message).
        """
        job = EmbedJob(0, spec, device, tuple(texts))
        while not job.done:
            self.run_chunk(job)
        return job.vectors, job.tokens

    def run_chunk(self, job: EmbedJob) -> None:
        """Embed the next chunk of ``job`` (loading its model first if needed).

        Raises:
            Exception: the model cannot be loaded or run (the worker reports the message).
        """
        self._load(job.spec, job.device)
        size = FIRST_CHUNK
        if self._seconds_per_text:
            size = int(CHUNK_TARGET_SECONDS / self._seconds_per_text)
        start = len(job.vectors)
        texts = list(job.texts[start : start + max(1, min(size, MAX_CHUNK))])
        began = time.perf_counter()
        vectors = self._pipe.embed_documents(texts)
        # One batched encode: per-text calls cost ten times the embedding itself.
        job.tokens += int(self._tokenizer.encode(texts).attention_mask.data.sum())
        self._seconds_per_text = (time.perf_counter() - began) / len(texts)
        job.vectors.extend([float(x) for x in vector] for vector in vectors)

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
        self._seconds_per_text = None

    def close(self) -> None:
        self._pipe = self._tokenizer = self._key = self._seconds_per_text = None


def _pooling(folder: Path, kinds: Any) -> Any:
    """The pooling a sentence-transformers model declares (CLS when it says nothing)."""
    config = read_json(folder / "1_Pooling" / "config.json")
    if config.get("pooling_mode_mean_tokens"):
        return kinds.MEAN
    if config.get("pooling_mode_lasttoken"):
        return kinds.LAST_TOKEN
    return kinds.CLS
