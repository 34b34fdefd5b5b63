"""Embedding models in the engine worker: GenAI's ``TextEmbeddingPipeline``.

One embedding model is kept loaded beside the chat model (IDE plugins index code with one
while chatting with the other). It is loaded on the first request that names it and replaced
when another is named. Embedding runs on the worker's loop (the one-thread rule), a chunk at
a time: an indexer's batch of thousands of texts would otherwise hold the loop for a minute
while every chat stream waits. Each chunk is sized to take about
:data:`CHUNK_TARGET_SECONDS`, from the time the previous chunks took, so chat steps run in
between on any model and machine.

Every text is counted before it is embedded: a text longer than the model reads (its
position embeddings, its tokenizer's ``model_max_length``) is refused with both numbers
(:class:`EmbedRefused`, a 400 naming ``input.N``) instead of being cut or run past the
model's positions; OpenAI refuses such inputs the same way.

Threading: used only from the worker's single loop thread.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.models import ModelSpec, read_json, verify_files
from engine.worker.rerank import pair_limit

logger = logging.getLogger(__name__)

CHUNK_TARGET_SECONDS = 0.05
FIRST_CHUNK = 8
MAX_CHUNK = 256


class EmbedRefused(Exception):
    """A text the model cannot embed whole; ``param`` names it (``input.N``)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass
class EmbedJob:
    """One Embed request being worked through, chunk by chunk."""

    request_id: int
    spec: ModelSpec
    device: str
    texts: tuple[str, ...]
    vectors: list[list[float]] = field(default_factory=list)
    tokens: int = 0
    truncate: bool = False  # cut a text past the model's limit (GenAI does) instead of refusing

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
        self._max_length: int | None = None

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
        # One batched encode: per-text calls cost ten times the embedding itself.
        counts = [int(n) for n in self._tokenizer.encode(texts).attention_mask.data.sum(axis=1)]
        counts = self._check_lengths(job, start, counts)
        vectors = self._pipe.embed_documents(texts)
        job.tokens += sum(counts)
        self._seconds_per_text = (time.perf_counter() - began) / len(texts)
        job.vectors.extend([float(x) for x in vector] for vector in vectors)

    def _check_lengths(self, job: EmbedJob, start: int, counts: list[int]) -> list[int]:
        """The tokens each text is embedded from (cut at the limit when ``job.truncate``)."""
        limit = self._max_length
        if limit is None:
            return counts
        if job.truncate:
            return [min(count, limit) for count in counts]  # what GenAI embeds, reported so
        for offset, count in enumerate(counts):
            if count > limit:
                index = start + offset
                raise EmbedRefused(
                    f"input {index} has {count} tokens; {job.spec.id} reads at most {limit}. "
                    "Split the text or shorten it",
                    f"input.{index}",
                )
        return counts

    def _load(self, spec: ModelSpec, device: str) -> None:
        import openvino_genai as ov_genai

        key = (spec.path, device)
        if self._key == key:
            return
        self.close()
        verify_files(spec)  # the server checked too; the files may have changed since
        config = ov_genai.TextEmbeddingPipeline.Config()
        config.pooling_type = _pooling(spec.path, ov_genai.TextEmbeddingPipeline.PoolingType)
        config.normalize = True
        max_length = pair_limit(spec.path)
        if max_length is not None:
            config.max_length = max_length  # GenAI never runs past it; we refuse past it
        else:
            logger.warning("%s states no maximum length; long texts are not checked", spec.id)
        logger.info("loading embedding model %s on %s", spec.id, device)
        self._pipe = ov_genai.TextEmbeddingPipeline(str(spec.path), device, config)
        self._tokenizer = ov_genai.Tokenizer(str(spec.path))
        self._key = key
        self._seconds_per_text = None
        self._max_length = max_length

    def close(self) -> None:
        self._pipe = self._tokenizer = self._key = self._seconds_per_text = None
        self._max_length = None


def _pooling(folder: Path, kinds: Any) -> Any:
    """The pooling a sentence-transformers model declares (CLS when it says nothing)."""
    config = read_json(folder / "1_Pooling" / "config.json")
    if config.get("pooling_mode_mean_tokens"):
        return kinds.MEAN
    if config.get("pooling_mode_lasttoken"):
        return kinds.LAST_TOKEN
    return kinds.CLS
