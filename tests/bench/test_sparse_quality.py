"""The sparse-prefill accuracy bench: its prompts and its scores, without a model.

Why: the figures compare variants prompt by prompt, so every prompt must have exactly the
length asked for, start where a file starts (as an agent's prompt of whole files does) and
share no token with another prompt; and a variant identical to the reference must score
exactly 1.000x and full agreement.
"""

from __future__ import annotations

import random

from bench.quality_model import RECALL_SKIP, RECALL_SPAN, is_copy_row, recall_window, repeat_spans
from bench.sparse_quality import (
    CONTINUATION,
    MID_FROM_END,
    MID_SOURCE,
    Scores,
    build_prompts,
    first_divergence,
    mid_recall_window,
    regions,
    summary,
)

SEP = 0


def files_of(sizes: list[int]) -> list[list[int]]:
    """Files whose tokens name their file (f * 1000 + i), so a prompt's origin is visible."""
    return [[f * 1000 + i + 1 for i in range(n)] for f, n in enumerate(sizes, start=1)]


def test_prompts_have_the_length_asked_start_at_files_and_do_not_overlap() -> None:
    files = files_of([300, 50, 900, 120, 700, 400, 1000, 80])
    prompts = build_prompts(files, 500, 3, SEP)
    assert len(prompts) == 3
    assert all(len(p) == 500 for p in prompts)
    firsts = {f[0] for f in files}
    assert all(p[0] in firsts for p in prompts)
    tokens = [t for p in prompts for t in p if t != SEP]
    assert len(tokens) == len(set(tokens))
    assert SEP in prompts[0]  # files are joined with the separator, as in training


def test_too_short_a_text_gives_fewer_prompts() -> None:
    assert build_prompts(files_of([100, 100]), 150, 4, SEP) == [
        [*files_of([100, 100])[0], SEP, *files_of([100, 100])[1][:49]]
    ]
    assert build_prompts(files_of([100]), 500, 4, SEP) == []


def test_regions_split_the_prompt_where_sparse_prefill_changes() -> None:
    r = regions(8192)
    assert r["<2048"] == (1, 2048)
    assert r["sparse"] == (2048, 8092)
    assert r[f"last {CONTINUATION}"] == (8192 - CONTINUATION, 8192)
    assert "copy" not in r
    # the end copy's sparsely prefilled part; the mid copy wholly in the sparse region
    assert regions(8192, "recall")["copy"] == (8192 - RECALL_SPAN + RECALL_SKIP, 8092)
    a, b = regions(8192, "recall-mid")["copy"]
    assert r["sparse"][0] < a < b < r["sparse"][1]


def test_mid_recall_prompts_copy_from_beyond_tri_shapes_windows() -> None:
    """The copy's source must lie past tri-shape's 128 start tokens and more than its 1,920
    recent tokens before the copy, or the prompt tests nothing a sparse query loses."""
    for n in (4096, 8192):
        ids = list(range(n))
        mid = mid_recall_window(ids)
        assert len(mid) == n
        dest = n - MID_FROM_END
        assert mid[dest : dest + RECALL_SPAN] == ids[MID_SOURCE : MID_SOURCE + RECALL_SPAN]
        assert mid[:dest] == ids[:dest] and mid[dest + RECALL_SPAN :] == ids[dest + RECALL_SPAN :]
        assert MID_SOURCE >= 128 and dest - (MID_SOURCE + RECALL_SPAN) > 1920
        a, b = regions(n, "recall-mid")["copy"]
        assert (a, b) == (dest + RECALL_SKIP, dest + RECALL_SPAN)


def test_an_identical_variant_scores_one_and_full_agreement() -> None:
    greedy = [list(range(CONTINUATION)), list(range(5, 5 + CONTINUATION))]
    ref = Scores(logprobs=[[-1.0] * 4096, [-2.0] * 4096], greedy=greedy, truth=greedy)
    same = summary(ref, ref, regions(4096))
    assert same["ppl sparse vs dense"] == 1.0
    assert same["greedy agreement"] == 1.0
    assert same["text agreement"] == 1.0
    assert same["identical"] == 2
    changed = Scores(
        logprobs=ref.logprobs,
        greedy=[greedy[0][:10] + [999] * (CONTINUATION - 10), greedy[1]],
        truth=greedy,
    )
    s = summary(changed, ref, regions(4096))
    assert s["first divergence min"] == 10
    assert s["identical"] == 1
    assert first_divergence([1, 2, 3], [1, 2, 4]) == 2


def test_recall_prompts_end_with_a_copy_from_beyond_a_2k_window() -> None:
    for n in (4096, 8192):
        ids = list(range(n))
        recall = recall_window(ids)
        assert len(recall) == n
        assert recall[: n - RECALL_SPAN] == ids[: n - RECALL_SPAN]
        assert recall[-RECALL_SPAN:] == ids[n // 4 : n // 4 + RECALL_SPAN]
        assert (n - RECALL_SPAN) - (n // 4 + RECALL_SPAN) > 2048 - RECALL_SPAN


def test_training_repeats_copy_forward_inside_the_window() -> None:
    rng = random.Random(0)
    for source, dest, length in repeat_spans(8192, 200, rng):
        assert 32 <= length <= 256
        assert source >= 0
        assert source + length <= dest
        assert dest + length <= 8192


def test_copy_rows_are_spread_evenly_at_any_batch_size() -> None:
    """--copy-rows 0.5 at one row a step must alternate, not bunch (long windows train one
    row a step); at 8 rows a step every step gets its share."""
    assert [is_copy_row(n, 0.5) for n in range(6)] == [False, True] * 3
    per_step = [sum(is_copy_row(s * 8 + i, 0.25) for i in range(8)) for s in range(10)]
    assert per_step == [2] * 10
    assert not any(is_copy_row(n, 0.0) for n in range(100))
    assert all(is_copy_row(n, 1.0) for n in range(100))
