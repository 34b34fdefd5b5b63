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
- A sequence that ended also leaves its last, partly filled block, found by a prompt that
  holds the same tokens up to where that sequence ended (a second turn that repeats the
  first turn's prompt and reply). The request that reuses it keys that block anew once it
  decodes in it or grows past it (see :meth:`PrefixLedger.hold`).
- A prompt found whole still has its last token computed (GenAI needs its logits), so at
  most ``len(prompt) - 1`` tokens are reused.
- A sequence's blocks are keyed one token a decoding step: without speculation that is its
  prompt and reply but the last token (sampled, never fed back); with speculative decoding
  (prompt lookup, a draft model) the guesses a step accepts beyond one are computed but
  never found again by a later prompt (measured on GenAI 2026.4 with prompt lookup; a draft
  model is taken to behave the same, unmeasured: no draft pair small enough is in the repo).

What the number means: the tokens at the head of this prompt that are, token for token, KV
blocks of sequences this pipeline computed since it loaded (a prompt's whole blocks once its
first token came; a prompt and its reply, last partial block included, once it ended), and
that the ledger's model of the pool has not overwritten. Measured against GenAI itself
(tests/engine/test_prefix_ledger.py counts the prompt tokens GenAI computes, one per step),
it is GenAI's own number in the cases tested (with prompt lookup, a few prompts in a
hundred are counted up to one step's guesses short). Its limits, each making it differ:

- Lower: blocks of a request still running beside this one (its prompt until its first
  token, its prompt's last partial block, its reply so far) are not counted until then.
- Either way under memory pressure: the pool model evicts blocks least recently used
  first, as GenAI overwrites them, with a capacity from the KV bytes per token at f16 (the
  demo model's pool here: 131,072 blocks a GB, which GenAI's ``cache_usage`` confirms; a u8
  pool holds more, so the model evicts earlier and counts low). Requests one after another
  on a pool of 10 to 24 blocks: 358 of 360 counts exact, one 4 tokens over. Requests in
  flight together hold blocks GenAI cannot overwrite, which the model does not see.
  Without the model's dimensions there is no capacity and nothing is evicted.
- Vision-language prompts are tokenized by GenAI with their images: the worker never sees
  their ids, and reports 0 for them (see :class:`engine.worker.backends.BatchedBackend`).

Threading: used only from the worker's loop thread (like the backend that owns it).
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

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

    Blocks are keyed like GenAI's: a chained hash of every token up to the block's end, so
    a key stands for its whole prefix. A sequence that ended also leaves its last, partly
    filled block, keyed at the length it ended at. ``_blocks`` is in least-recently-used
    order (a lookup that reuses a block refreshes it, as GenAI stamps restored blocks).
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

    @staticmethod
    def _tail_key(before: int, tail: Sequence[int]) -> int:
        """The key of a partly filled block holding ``tail`` after the block keyed ``before``."""
        return hash(("tail", before, tuple(tail)))

    def cached(self, prompt_ids: Sequence[int]) -> Found:
        """The tokens of ``prompt_ids`` GenAI reuses when the prompt is added now (see the
        module docstring for what the number means); refreshes the blocks it reuses.

        GenAI's search (``get_full_prefix_restore_plan``): whole blocks from the start while
        found; then, in the first block not found (or the prompt's own last, partial one),
        its content up to the prompt's end, then the shortest partial content found.
        """
        found = 0
        before = 0
        for key in self._keys(prompt_ids):
            if key not in self._blocks:
                break
            self._blocks.move_to_end(key)
            before = key
            found += 1
        start = found * self.block_size
        room = min(self.block_size, len(prompt_ids) - start)
        tokens = start
        taken: int | None = None
        lengths = list(range(1, room))
        if 0 < room < self.block_size:  # the prompt ends inside this block: that first
            lengths.insert(0, room)
        for length in lengths:
            key = self._tail_key(before, prompt_ids[start : start + length])
            if key in self._blocks:
                self._blocks.move_to_end(key)
                tokens, taken = start + length, key
                break
        # A prompt found whole still has its last token computed.
        return Found(min(tokens, max(len(prompt_ids) - 1, 0)), taken, start + self.block_size)

    def hold(
        self,
        ids: Sequence[int],
        *,
        ended: bool = False,
        prompt_tokens: int | None = None,
        found: Found | None = None,
    ) -> None:
        """Record that the pipeline computed the KV of ``ids``: a prompt once its first token
        came; with ``ended``, the prompt (``prompt_tokens`` long) and every reply token fed
        back, its last, partly filled block included. A running sequence's last block is not
        recorded: GenAI keys it anew as it grows. Evicts the least recently used blocks
        beyond capacity.

        ``found`` is what :meth:`cached` said when the request joined. A request that took
        over an ended sequence's partial block keys it anew only if it decoded in it (two
        reply tokens or more) or grew past it; otherwise (one reply token, a prompt ending
        in that block) the block keeps its old key, and this request's own end is not one.
        """
        keys = self._keys(ids)
        for key in keys:
            if key in self._blocks:
                self._blocks.move_to_end(key)
            else:
                self._blocks[key] = None
        whole = len(keys) * self.block_size
        own_tail = ended and whole < len(ids)
        if ended and found is not None and found.taken is not None:
            decoded = prompt_tokens is not None and len(ids) > prompt_tokens
            if decoded or len(ids) >= found.block_end:
                self._blocks.pop(found.taken, None)  # keyed anew
            else:
                own_tail = False
        if own_tail:
            tail = self._tail_key(keys[-1] if keys else 0, ids[whole:])
            self._blocks[tail] = None
            self._blocks.move_to_end(tail)
        if self.capacity is not None:
            while len(self._blocks) > self.capacity:
                self._blocks.popitem(last=False)


@dataclass(frozen=True)
class Found:
    """What :meth:`PrefixLedger.cached` found: ``tokens`` reused; ``taken``, the key of an
    ended sequence's partial block the request took over (None: none), which ends at
    ``block_end`` tokens."""

    tokens: int
    taken: int | None = None
    block_end: int = 0
