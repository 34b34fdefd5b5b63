"""The prefix ledger's rules (engine.worker.prefix_ledger), pure: no OpenVINO.

What GenAI 2026.4 reuses is checked end to end in tests/server/test_cached_tokens_e2e.py;
these pin the block arithmetic the number is made of.
"""

from __future__ import annotations

from engine.context_fit import KVDims
from engine.worker.prefix_ledger import PrefixLedger, block_size_for, capacity_blocks


def test_only_whole_shared_blocks_count() -> None:
    ledger = PrefixLedger(4, None)
    assert ledger.cached(list(range(10))) == 0  # nothing held yet
    ledger.hold(list(range(10)))  # blocks [0..3], [4..7]; the last two tokens fill none
    assert len(ledger) == 2
    assert ledger.cached([*range(9), 99]) == 8
    assert ledger.cached([0, 1, 2, 3, 4, 5, 99, 7, 8]) == 4  # block 2 differs: stop there
    assert ledger.cached([99, *range(1, 10)]) == 0  # a block is its whole prefix


def test_a_prompt_found_whole_still_computes_its_last_token() -> None:
    ledger = PrefixLedger(4, None)
    ledger.hold(list(range(12)))
    assert ledger.cached(list(range(8))) == 7
    assert ledger.cached([]) == 0


def test_the_least_recently_used_blocks_go_first_beyond_capacity() -> None:
    ledger = PrefixLedger(2, 3)
    ledger.hold([1, 2, 3, 4])  # two blocks
    ledger.hold([9, 9])  # a third
    assert ledger.cached([1, 2, 3, 4, 5]) == 4  # found again: now the most recent
    ledger.hold([7, 7])  # a fourth: [9, 9] was the least recently used
    assert len(ledger) == 3
    assert ledger.cached([9, 9, 0]) == 0
    assert ledger.cached([1, 2, 3, 4, 5]) == 4


def test_block_size_and_capacity_follow_genai() -> None:
    assert block_size_for("CPU") == 32
    assert block_size_for("GPU.1") == 16
    assert block_size_for("HETERO:GPU.0,CPU") == 32
    demo = KVDims(layers=2, kv_heads=2, head_dim=16)  # f16: 256 bytes a token
    assert capacity_blocks(1 << 30, demo, 32) == (1 << 30) // (256 * 32)
    assert capacity_blocks(1 << 30, demo, 32, "f32") == (1 << 30) // (512 * 32)
    assert capacity_blocks(1 << 30, None, 32) is None
