"""Rerankers in the engine worker: GenAI's ``TextRerankPipeline`` over a cross-encoder.

One reranker is kept loaded beside the chat model and the embedding model (code search and
RAG rerank what an index found while the IDE chats), loaded on the first request that names
it. Like embeddings, a request is scored a chunk of documents at a time on the worker's loop,
each chunk sized from the time the previous ones took, so chat steps run in between.

Every (query, document) pair is counted before it is scored: GenAI truncates a pair longer
than the model reads, and a score of a cut document would silently rank what the model never
saw. A pair past the limit refuses the request, naming the document (or the query), and so
does a document with no tokens at all.

Each document is scored alone (``rerank(query, [document])``). Given several, GenAI pairs
the query with them through openvino-tokenizers' broadcast, which in 2026.4 can write past
its buffer (seen with a query longer than its documents, and with several empty documents:
a heap corruption that kills the worker); a batch of texts that are all empty fails to
tokenize at all. The counting here uses the forms that held up under fuzzing: the query
repeated per document, and a sentinel text that keeps a batch from being all empty.

Scores are ``sigmoid(logit)`` of the model's one logit, as the model's own library gives
them; on a CPU they are computed in f32 (some CPUs default to bf16, which moves scores
enough to reorder close documents).

Threading: used only from the worker's single loop thread.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.models import ModelSpec, read_json, verify_files

logger = logging.getLogger(__name__)

CHUNK_TARGET_SECONDS = 0.05
FIRST_CHUNK = 4
MAX_CHUNK = 64
# Model types whose position ids start after the padding index, two places in.
_OFFSET_POSITIONS = frozenset({"roberta", "xlm-roberta", "camembert"})
_MAX_SANE_LENGTH = 1_000_000  # tokenizers without a limit say 10**30
_SENTINEL = "a"  # a text every tokenizer turns into at least one token


class RerankRefused(Exception):
    """A document the model cannot score as sent (too long, or empty); ``param`` names it."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass
class RerankJob:
    """One Rerank request being worked through, chunk by chunk."""

    request_id: int
    spec: ModelSpec
    device: str
    query: str
    documents: tuple[str, ...]
    scores: list[float] = field(default_factory=list)  # by document index
    tokens: int = 0

    @property
    def done(self) -> bool:
        return len(self.scores) >= len(self.documents)


class RerankRunner:
    """Loads rerankers on demand and scores documents against a query with them."""

    def __init__(self) -> None:
        self._key: tuple[Path, str] | None = None
        self._pipe: Any = None
        self._tokenizer: Any = None
        self._max_length: int | None = None
        self._seconds_per_document: float | None = None  # measured on the loaded model

    def run_chunk(self, job: RerankJob) -> None:
        """Score the next chunk of ``job`` (loading its model first if needed).

        Raises:
            RerankRefused: a document in the chunk is empty, or longer (with the query)
                than the model reads.
            Exception: the model cannot be loaded or run (the worker reports the message).
        """
        self._load(job.spec, job.device)
        size = FIRST_CHUNK
        if self._seconds_per_document:
            size = int(CHUNK_TARGET_SECONDS / self._seconds_per_document)
        start = len(job.scores)
        documents = list(job.documents[start : start + max(1, min(size, MAX_CHUNK))])
        began = time.perf_counter()
        counts = self._token_counts(documents)
        self._check_not_empty(job, start, counts)
        lengths = self._pair_lengths(job.query, documents)
        self._check_lengths(job, start, lengths, counts)
        scores = []
        for document in documents:  # one at a time: see the module's docstring
            ((_, score),) = self._pipe.rerank(job.query, [document])
            scores.append(float(score))
        self._seconds_per_document = (time.perf_counter() - began) / len(documents)
        job.scores.extend(scores)
        job.tokens += sum(lengths)

    def _token_counts(self, texts: list[str]) -> list[int]:
        """Tokens of each text alone, without special tokens."""
        encoded = self._tokenizer.encode([*texts, _SENTINEL], add_special_tokens=False)
        return [int(n) for n in encoded.attention_mask.data.sum(axis=1)[:-1]]

    def _pair_lengths(self, query: str, documents: list[str]) -> list[int]:
        """Tokens of each pair as GenAI builds it (paired input, or the texts joined)."""
        if self._tokenizer.supports_paired_input():
            encoded = self._tokenizer.encode([query] * len(documents), documents)
        else:
            encoded = self._tokenizer.encode([query + document for document in documents])
        return [int(n) for n in encoded.attention_mask.data.sum(axis=1)]

    @staticmethod
    def _check_not_empty(job: RerankJob, start: int, counts: list[int]) -> None:
        for offset, count in enumerate(counts):
            if count == 0:
                raise RerankRefused(
                    f"document {start + offset} has no text {job.spec.id} reads (it is empty, "
                    "or holds only characters its tokenizer drops); leave it out",
                    f"documents.{start + offset}",
                )

    def _check_lengths(
        self, job: RerankJob, start: int, lengths: list[int], counts: list[int]
    ) -> None:
        limit = self._max_length
        if limit is None:
            return
        for offset, length in enumerate(lengths):
            if length <= limit:
                continue
            query = length - counts[offset]  # the query's tokens and the special ones
            if query >= limit:
                raise RerankRefused(
                    f"the query takes {query} of the {limit} tokens {job.spec.id} reads for "
                    "a query and a document together, leaving no room for a document",
                    "query",
                )
            index = start + offset
            raise RerankRefused(
                f"the query and document {index} take {length} tokens together; "
                f"{job.spec.id} reads at most {limit}. Split the document or shorten it",
                f"documents.{index}",
            )

    def _load(self, spec: ModelSpec, device: str) -> None:
        import openvino_genai as ov_genai

        key = (spec.path, device)
        if self._key == key:
            return
        self.close()
        verify_files(spec)  # the server checked too; the files may have changed since
        max_length = pair_limit(spec.path)
        config = ov_genai.TextRerankPipeline.Config()
        config.top_n = 1  # one document a call; the server sorts and cuts
        if max_length is not None:
            config.max_length = max_length  # what GenAI truncates to is what we refuse past
        else:
            logger.warning("%s states no maximum length; long documents may be cut", spec.id)
        properties = {"INFERENCE_PRECISION_HINT": "f32"} if device.startswith("CPU") else {}
        logger.info("loading reranker %s on %s", spec.id, device)
        self._pipe = ov_genai.TextRerankPipeline(str(spec.path), device, config, **properties)
        self._tokenizer = ov_genai.Tokenizer(str(spec.path), add_second_input=True)
        if not self._tokenizer.supports_paired_input():
            # GenAI then joins query and document with no separator: scores suffer.
            logger.warning(
                "%s's tokenizer takes no (query, document) pairs; converting the model "
                "again with a newer openvino-tokenizers fixes that",
                spec.id,
            )
        self._max_length = max_length
        self._key = key
        self._seconds_per_document = None

    def close(self) -> None:
        self._pipe = self._tokenizer = self._key = None
        self._max_length = self._seconds_per_document = None


def pair_limit(folder: Path) -> int | None:
    """The most tokens a (query, document) pair may take in the model at ``folder``.

    The tokenizer's ``model_max_length`` within the model's position embeddings (RoBERTa's
    kind lose two positions to their padding offset); ``None`` when neither says.
    """
    config = read_json(folder / "config.json")
    positions = config.get("max_position_embeddings")
    if isinstance(positions, int) and config.get("model_type") in _OFFSET_POSITIONS:
        positions -= 2
    stated = read_json(folder / "tokenizer_config.json").get("model_max_length")
    limits = [
        value
        for value in (positions, stated)
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < _MAX_SANE_LENGTH
    ]
    return min(limits) if limits else None
