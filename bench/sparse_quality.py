"""Accuracy cost of GenAI's sparse prefill (tri-shape, XAttention) and of the KV cache's
precision (f16, u8, u4) on a long-context proxy.

Why: ``SchedulerConfig.use_sparse_attention`` made 8k prefill 1.13-1.29x faster
(``bench.long_prefill``), but both modes are lossy: prompt tokens attend to only part of
the prefix while the prompt is prefilled, so the KV cache the reply decodes from is not the
one dense attention builds. Before a mode can be a default for long agent prompts, what it
costs must be measured on a trained model that uses long context (``bench.quality_model``
trained with a long ``--seq``; its ``training.json`` ``position_loss`` says how much).

What, for every variant (dense reference, the sparse modes with GenAI's defaults and more
aggressive settings, dense in the server's default precision as a yardstick) and every
prompt length ``L``: ``--prompts`` prompts per held-out text (the model's held-out standard
library files and this repository's ``engine/`` source, files joined by ``<|endoftext|>`` as
in training, each prompt starting at a file start, none overlapping) go through a
``ContinuousBatchingPipeline`` set up like the engine worker's (dynamic split-fuse, default
``max_num_batched_tokens``; prefix caching off so no request reuses another's KV):

- teacher forcing: all ``L`` tokens as the prompt with ``echo`` and ``logprobs``, which
  returns the log-probability of every prompt token as the (sparse) prefill computed it.
  Scored by region of the target position: before 2,048 (tri-shape's 128 + 1,920 tokens:
  these see their whole prefix either way), from 2,048 to ``L - 100`` (sparse queries), and
  the last 64 (inside the last 100 tokens both modes prefill densely: dense queries over the
  KV the sparse prefill built, i.e. what the first decoded tokens see; for XAttention the
  dense tail may start up to a chunk earlier);
- greedy: the first ``L - 64`` tokens as the prompt, 64 greedy tokens, compared with the
  dense reference's 64 (position-wise agreement, first diverging position) and with the
  text's own 64 tokens.

Three kinds of prompt: ``files``, the files as they are; ``recall``, the same prompts with
their last 256 tokens replaced by a copy of the passage a quarter into the prompt
(``bench.quality_model.recall_window``: 2.8k tokens back at 4k, 5.9k at 8k), as when an
agent quotes code it read earlier: the last 64 tokens are the copy's end, prefilled
densely, and the ``copy`` region its tokens before them, prefilled by sparse queries; and
``recall-mid``, a passage from token 256 copied to 1,024 tokens before the end
(:func:`mid_recall_window`: 2.8k / 6.9k tokens back), wholly in the sparse region, so its
``copy`` region is recall that tri-shape cannot see, and the last 64 tokens show whether
that damage reaches the reply. A proxy must use long context for these to mean anything:
``position_loss``'s ``recall full`` well below ``recall ctx 2048`` (``--copy-rows``).

Sparse attention changes prefill only; decoding is dense in every variant. So the figures
are what the sparse prefill's KV does to the tokens that follow a long prompt.

What it can and cannot show: how much a mode disturbs a small trained model, against the
disturbance bf16 execution already causes; what it costs recall from beyond 2k tokens only
on a proxy that provably leans on that context (none trained here has yet:
docs/benchmarks.md). Not what it does to a 1.5B-8B model: large models have attention sinks
and retrieval heads a 2-layer proxy has not grown, and tasks (a name defined 20k tokens
earlier, a tool schema) whose loss a perplexity average dilutes.

Threading: single-threaded script; each pipeline runs one request at a time.

Run in the torch/optimum venv (transformers for the tokenizer; openvino-genai is there
too), from the repository root::

    PYTHONPATH=$PWD .venv-convert/bin/python -m bench.sparse_quality \\
        --model CACHE/quality/long-256 [--lengths 4096 8192] [--prompts 6] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bench.common import setup_logging
from bench.quality_model import RECALL_SKIP, RECALL_SPAN, recall_window

logger = logging.getLogger(__name__)

Kind = Literal["files", "recall", "recall-mid"]

CONTINUATION = 64  # tokens scored after the long prompt (teacher-forced and greedy)
DENSE_TAIL = 100  # GenAI's num_last_dense_tokens_in_prefill default
EARLY = 2048  # tri-shape's default 128 start + 1,920 recent tokens
F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
SERVER_DEFAULT = {"KV_CACHE_PRECISION": "f16"}  # bf16 execution where the CPU has it
REFERENCE = "dense"
MID_SOURCE = 256  # recall-mid: the copied passage starts here, past tri-shape's 128 start
MID_FROM_END = 1024  # and is copied to this many tokens before the prompt's end
KINDS: tuple[Kind, ...] = ("files", "recall", "recall-mid")


@dataclass(frozen=True)
class Variant:
    """One pipeline setup: ``sparse`` holds ``SparseAttentionConfig`` fields (None: dense)."""

    name: str
    sparse: Mapping[str, Any] | None
    properties: Mapping[str, str]
    note: str


VARIANTS = {
    v.name: v
    for v in (
        Variant(REFERENCE, None, F32, "dense, f32 execution and KV (the reference)"),
        Variant("dense-bf16", None, SERVER_DEFAULT, "dense, default precision, f16 KV"),
        Variant(
            "dense-u8kv",
            None,
            {"KV_CACHE_PRECISION": "u8"},
            "dense, default precision, u8 KV (OpenVINO's CPU default: a self-tune candidate)",
        ),
        Variant(
            "dense-u4kv", None, {"KV_CACHE_PRECISION": "u4"}, "dense, default precision, u4 KV"
        ),
        Variant("trishape", {"mode": "TRISHAPE"}, F32, "defaults: 128 + 1,920, last 100"),
        Variant(
            "trishape-512",
            {"mode": "TRISHAPE", "num_retained_recent_tokens_in_cache": 384},
            F32,
            "128 start + 384 recent, last 100",
        ),
        Variant("xattention", {"mode": "XATTENTION"}, F32, "defaults: threshold 0.8, block 64"),
        *(
            Variant(f"xattention-{t}", {"mode": "XATTENTION", "xattention_threshold": t}, F32, n)
            for t, n in (
                (0.5, "threshold 0.5, block 64"),
                (0.95, "threshold 0.95 (milder), block 64"),
                (1.0, "threshold 1.0: keeps every block, so it must match dense (a check)"),
            )
        ),
        Variant("trishape-bf16", {"mode": "TRISHAPE"}, SERVER_DEFAULT, "defaults, as served"),
        Variant("xattention-bf16", {"mode": "XATTENTION"}, SERVER_DEFAULT, "defaults, as served"),
    )
}


# --- prompts -------------------------------------------------------------------------------


def build_prompts(
    files: Sequence[Sequence[int]], length: int, count: int, separator: int
) -> list[list[int]]:
    """``count`` prompts of exactly ``length`` tokens from one text's files.

    The files are joined as in training (each followed by ``separator``); every prompt
    starts at a file start, so the definitions a file opens with are in it, and no two
    prompts share a token. Of the non-overlapping starts (taken first-fit in file order),
    ``count`` evenly spaced ones are used; fewer if the text is too short.
    """
    stream: list[int] = []
    starts: list[int] = []
    for ids in files:
        starts.append(len(stream))
        stream.extend(ids)
        stream.append(separator)
    usable: list[int] = []
    for start in starts:
        if start + length <= len(stream) and (not usable or start >= usable[-1] + length):
            usable.append(start)
    if len(usable) > count:
        usable = [usable[i * len(usable) // count] for i in range(count)]
    return [stream[s : s + length] for s in usable]


# --- scoring -------------------------------------------------------------------------------


def mid_recall_window(ids: Sequence[int]) -> list[int]:
    """``ids`` with the ``RECALL_SPAN`` tokens from ``MID_SOURCE`` copied to ``MID_FROM_END``
    tokens before the end: a copy prefilled by sparse queries (tri-shape's 1,920 recent
    tokens do not reach its source, nor do its 128 start tokens), as when a prompt quotes
    code it read far above, long before the question at its end."""
    dest = len(ids) - MID_FROM_END
    return [*ids[:dest], *ids[MID_SOURCE : MID_SOURCE + RECALL_SPAN], *ids[dest + RECALL_SPAN :]]


def regions(length: int, kind: Kind = "files") -> dict[str, tuple[int, int]]:
    """Target-position ranges ``[a, b)`` scored separately for a prompt of ``length``;
    recall prompts add ``copy``: their copy's tokens after its first ``RECALL_SKIP`` (which
    no model can know are a copy), as far as sparse queries prefill them."""
    spans = {
        f"<{EARLY}": (1, min(EARLY, length - DENSE_TAIL)),
        "sparse": (EARLY, length - DENSE_TAIL),
        f"last {CONTINUATION}": (length - CONTINUATION, length),
    }
    if kind == "recall":
        spans["copy"] = (length - RECALL_SPAN + RECALL_SKIP, length - DENSE_TAIL)
    elif kind == "recall-mid":
        dest = length - MID_FROM_END
        spans["copy"] = (dest + RECALL_SKIP, dest + RECALL_SPAN)
    return spans


def first_divergence(ref: Sequence[int], got: Sequence[int]) -> int:
    """Index of the first differing token (``len(ref)`` when none differs)."""
    for i, (a, b) in enumerate(zip(ref, got, strict=True)):
        if a != b:
            return i
    return len(ref)


@dataclass
class Scores:
    """One (variant, length): per-prompt teacher-forced log-probs and greedy tokens."""

    logprobs: list[list[float]] = field(default_factory=list)
    greedy: list[list[int]] = field(default_factory=list)
    truth: list[list[int]] = field(default_factory=list)  # the text's last CONTINUATION tokens
    seconds: float = 0.0

    def nll(self, a: int, b: int) -> float:
        """Mean negative log-likelihood (nats/token) of target positions ``[a, b)``."""
        values = [-lp for row in self.logprobs for lp in row[a:b]]
        return sum(values) / len(values) if values else math.nan


def agreement(pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> float:
    """Share of positions where the two token lists of each pair agree."""
    agree = sum(x == y for a, b in pairs for x, y in zip(a, b, strict=True))
    total = sum(len(a) for a, _ in pairs)
    return agree / total if total else math.nan


def summary(scores: Scores, ref: Scores, spans: Mapping[str, tuple[int, int]]) -> dict[str, Any]:
    """PPL per region of ``spans`` (and vs the reference) and greedy agreement with the
    reference."""
    out: dict[str, Any] = {"prompts": len(scores.greedy), "seconds": round(scores.seconds, 1)}
    for name, (a, b) in spans.items():
        nll, ref_nll = scores.nll(a, b), ref.nll(a, b)
        out[f"ppl {name}"] = math.exp(nll)
        out[f"ppl {name} vs dense"] = math.exp(nll - ref_nll)
        diffs = [
            abs(x - y)
            for row, ref_row in zip(scores.logprobs, ref.logprobs, strict=True)
            for x, y in zip(row[a:b], ref_row[a:b], strict=True)
        ]
        out[f"mean |dlogp| {name}"] = sum(diffs) / len(diffs) if diffs else math.nan
    pairs = list(zip(ref.greedy, scores.greedy, strict=True))
    divergence = [first_divergence(r, g) for r, g in pairs]
    out["greedy agreement"] = agreement(pairs)
    out["text agreement"] = agreement(list(zip(scores.truth, scores.greedy, strict=True)))
    out["first divergence median"] = statistics.median(divergence) if divergence else math.nan
    out["first divergence min"] = min(divergence, default=-1)
    out["identical"] = sum(d == CONTINUATION for d in divergence)
    return out


# --- GenAI ---------------------------------------------------------------------------------


def load(model: Path, variant: Variant) -> Any:
    """A ``ContinuousBatchingPipeline`` set up like the engine worker's, plus the variant."""
    import openvino_genai as ov_genai

    config = ov_genai.SchedulerConfig()
    config.enable_prefix_caching = False  # no request may reuse another's KV
    config.dynamic_split_fuse = True
    config.cache_size = 1
    if variant.sparse is not None:
        sparse = ov_genai.SparseAttentionConfig()
        for key, value in variant.sparse.items():
            mode = getattr(ov_genai.SparseAttentionMode, value) if key == "mode" else value
            setattr(sparse, key, mode)
        config.use_sparse_attention = True
        config.sparse_attention_config = sparse
        logger.info("%s: %s", variant.name, sparse.to_string().replace("\n", " "))
    return ov_genai.ContinuousBatchingPipeline(str(model), config, "CPU", dict(variant.properties))


def run_one(pipe: Any, request_id: int, ids: Sequence[int], echo: bool) -> Any:
    """Prefill ``ids`` and decode greedily (1 token with ``echo``, else ``CONTINUATION``);
    return the request's single output (``generated_ids``, ``generated_log_probs``)."""
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    config = ov_genai.GenerationConfig()
    config.max_new_tokens = 1 if echo else CONTINUATION
    config.min_new_tokens = config.max_new_tokens
    config.ignore_eos = True
    config.do_sample = False
    if echo:
        config.echo = True
        config.logprobs = 1
    handle = pipe.add_request(request_id, ov.Tensor(np.asarray([ids], dtype=np.int64)), config)
    while pipe.has_non_finished_requests():
        pipe.step()
    outputs = handle.read_all()
    if len(outputs) != 1:
        raise RuntimeError(f"expected one output, got {len(outputs)}")
    return outputs[0]


def measure(model: Path, variant: Variant, prompts: Sequence[Sequence[int]]) -> Scores:
    """Teacher-forced log-probs of each whole prompt and greedy tokens after its head."""
    pipe = load(model, variant)
    scores = Scores()
    start = time.monotonic()
    for i, ids in enumerate(prompts):
        out = run_one(pipe, 2 * i, ids, echo=True)
        logprobs = [float(x) for x in out.generated_log_probs[: len(ids)]]
        if len(logprobs) != len(ids):
            raise RuntimeError(f"echo gave {len(logprobs)} log-probs for {len(ids)} tokens")
        scores.logprobs.append(logprobs)
        scores.truth.append(list(ids[-CONTINUATION:]))
        out = run_one(pipe, 2 * i + 1, ids[:-CONTINUATION], echo=False)
        scores.greedy.append([int(t) for t in out.generated_ids])
    scores.seconds = time.monotonic() - start
    return scores


# --- report --------------------------------------------------------------------------------


def table(results: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
    """Markdown rows: one per (prompt set, variant)."""
    last = f"last {CONTINUATION}"
    lines = [
        f"| prompts | variant | PPL <{EARLY} | sparse-region PPL (vs dense) | "
        f"copy PPL (vs dense) | last-{CONTINUATION} PPL (vs dense) | "
        f"mean abs. d log p, last {CONTINUATION} | "
        "greedy = dense | greedy = text | first divergence: median, min | identical |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for prompts, by_variant in results.items():
        for name, s in by_variant.items():
            copy = (
                f"{s['ppl copy']:.3f} ({s['ppl copy vs dense']:.3f}x)" if "ppl copy" in s else "-"
            )
            lines.append(
                f"| {prompts} | {name} | {s[f'ppl <{EARLY}']:.3f} | "
                f"{s['ppl sparse']:.3f} ({s['ppl sparse vs dense']:.3f}x) | {copy} | "
                f"{s[f'ppl {last}']:.3f} ({s[f'ppl {last} vs dense']:.3f}x) | "
                f"{s[f'mean |dlogp| {last}']:.4f} | {s['greedy agreement']:.1%} | "
                f"{s['text agreement']:.1%} | "
                f"{s['first divergence median']:g}, {s['first divergence min']} | "
                f"{s['identical']}/{s['prompts']} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="a bench.quality_model OUT")
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--prompts", type=int, default=6, help="prompts per held-out text")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--kinds", nargs="+", choices=list(KINDS), default=list(KINDS))
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    from transformers import AutoTokenizer  # type: ignore[import-not-found]  # venv only

    from bench.quality import heldout_file_ids

    ov_dir = args.model / "ov"
    tokenizer = AutoTokenizer.from_pretrained(ov_dir)
    separator = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    texts = heldout_file_ids(tokenizer, args.model)
    variants = [REFERENCE, *(v for v in args.variants if v != REFERENCE)]
    record: dict[str, Any] = {"load_average_start": os.getloadavg(), "variants": {}}
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for length in args.lengths:
        files_prompts = [
            p
            for files in texts.values()
            for p in build_prompts(files, length, args.prompts, separator)
        ]
        kinds = {
            "files": files_prompts,
            "recall": [recall_window(p) for p in files_prompts],
            "recall-mid": [mid_recall_window(p) for p in files_prompts],
        }
        for kind in args.kinds:
            key = f"{length:,} {kind}"
            logger.info("%s: %d prompts", key, len(kinds[kind]))
            scores = {name: measure(ov_dir, VARIANTS[name], kinds[kind]) for name in variants}
            results[key] = {
                name: summary(s, scores[REFERENCE], regions(length, kind))
                for name, s in scores.items()
            }
            for name, s in results[key].items():
                logger.info("%s %s: %s", key, name, s)
    record["load_average_end"] = os.getloadavg()
    record["results"] = results
    record["variants"] = {
        name: {"sparse": VARIANTS[name].sparse, "properties": VARIANTS[name].properties,
               "note": VARIANTS[name].note}
        for name in variants
    }  # fmt: skip
    print("\n".join(table(results)))
    print(f"load average {record['load_average_start']} -> {record['load_average_end']}")
    if args.json:
        args.json.write_text(json.dumps(record, indent=1, default=list))
    return 0


if __name__ == "__main__":
    sys.exit(main())
