"""How many of a prompt's tokens GenAI's prefix cache already holds: ``cached_tokens``.

GenAI 2026.4's ``ContinuousBatchingPipeline`` reuses the KV blocks of earlier sequences
(``enable_prefix_caching``) inside ``add_request``, but reports no per-request count: its
``PerfMetrics`` has the prompt's length only, ``PipelineMetrics`` has pool-wide usage, and the
hit count (``num_prefix_cache_hit_tokens``) arrived in GenAI after 2026.4. So the worker
computes the number from what it gave the pipeline, under GenAI's own rules
(``BlockManager::restore_cached_blocks`` and ``allocate``):

- KV blocks hold ``block_size`` tokens (32 on CPU, 16 on GPU). A block is found by a hash of
  every token up to its end, so a block is reused only when the whole prompt up to it is the
  same token for token; the search stops at the first block not found.
- Whole blocks along a sequence keep their hash after it ends; they stay cached until the pool
  runs out of never-used blocks, then the least recently used free block is overwritten.
- A prompt found whole still has its last token computed (GenAI needs its logits), so at
  most ``len(prompt) - 1`` tokens are reused.

What the number means: the tokens at the head of this prompt that are, token for token, whole
KV blocks of a sequence this pipeline computed since it loaded (a prompt once its first token
came, a prompt and its reply once it ended), and that the ledger's model of the pool has not
overwritten. Its limits, each making it differ from GenAI's own count:

- Lower: GenAI may also reuse part of one more block (the last, partly filled block of an
  earlier reply), and blocks of a request still prefilling beside this one; neither is
  counted, so a turn can reuse up to ``block_size - 1`` tokens more than reported.
- Higher, only under memory pressure: the pool model evicts whole blocks least recently used
  first, with a capacity from the KV bytes per token at f16 (the larger of the CPU's
  precisions, so the model evicts no later than a u8 pool would) counting whole blocks
  only (partly filled blocks take room too); GenAI prefers blocks
  of requests that ended, so with a full pool and many requests in flight it may have
  overwritten a block the ledger still holds. Without the model's dimensions there is no
  capacity and nothing is evicted.
- Vision-language prompts are tokenized by GenAI with their images: the worker never sees
  their ids, and reports 0 for them (see :class:`engine.worker.backends.BatchedBackend`).

Threading: used only from the worker's loop thread (like the backend that owns it).
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Sequence

from engine.context_fit import KVDims, kv_bytes_per_token

logger = logging.getLogger(__name__)

CPU_BLOCK_SIZE = 32  # GenAI 2026.4 KVCacheManager: cpu_block_size
GPU_BLOCK_SIZE = 16  # gpu_block_size (without XAttention, which Sidelight does not enable)


def block_size_for(device: str) -> int:
    """GenAI's KV block size on ``device`` (GPU only when every device named is a GPU)."""
    parts = [p for p in device.replace(":", ",").split(",") if p and p.upper() != "HETERO"]
    all_gpu = bool(parts) and all(p.split(".", 1)[0].upper() == "GPU" for p in parts)
    return GPU_BLOCK_SIZE if all_gpu else CPU_BLOCK_SIZE


def capacity_blocks(
    cache_bytes: int, dims: KVDims | None, block_size: int, precision: str | None = None
) -> int | None:
    """How many KV blocks a pool of ``cache_bytes`` holds at f16, or at f32 when that is the
    ``KV_CACHE_PRECISION`` asked for (None: the model's dimensions are unknown)."""
    if dims is None or cache_bytes <= 0:
        return None
    per_block = kv_bytes_per_token(dims, "f16") * block_size
    if (precision or "").lower() == "f32":
        per_block *= 2
    return max(1, math.floor(cache_bytes / per_block))


class PrefixLedger:
    """The KV blocks GenAI's prefix cache holds, as far as the worker can know them.

    Blocks are keyed like GenAI's: a chained hash of every token up to the block's end.
    ``_blocks`` is in least-recently-used order (a lookup that reuses a block refreshes it,
    as GenAI stamps restored blocks).
    """

    def __init__(self, block_size: int, capacity: int | None) -> None:
        if block_size < 1:
            raise ValueError("block_size must be at least 1")
        self.block_size = block_size
        self.capacity = capacity
        self._blocks: collections.OrderedDict[int, None] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def _keys(self, ids: Sequence[int]) -> list[int]:
        """The keys of the whole blocks of ``ids``, in order."""
        keys: list[int] = []
        key = 0
        size = self.block_size
        for start in range(0, len(ids) - size + 1, size):
            key = hash((key, tuple(ids[start : start + size])))
            keys.append(key)
        return keys

    def cached(self, prompt_ids: Sequence[int]) -> int:
        """The tokens of ``prompt_ids`` GenAI reuses when the prompt is added now (see the
        module docstring for what the number means); refreshes the blocks it reuses."""
        found = 0
        for key in self._keys(prompt_ids):
            if key not in self._blocks:
                break
            self._blocks.move_to_end(key)
            found += 1
        tokens = found * self.block_size
        return min(tokens, max(len(prompt_ids) - 1, 0))

    def hold(self, ids: Sequence[int]) -> None:
        """Record that the pipeline computed the KV of ``ids`` (a prompt, or a prompt and
        the reply tokens fed back); evicts the least recently used blocks beyond capacity."""
        for key in self._keys(ids):
            if key in self._blocks:
                self._blocks.move_to_end(key)
            else:
                self._blocks[key] = None
        if self.capacity is not None:
            while len(self._blocks) > self.capacity:
                self._blocks.popitem(last=False)
