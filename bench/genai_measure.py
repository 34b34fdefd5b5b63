"""Importable measurements of raw OpenVINO GenAI: TTFT and decode speed, no server in between.

Why: the served figures (HTTP, IPC, incremental detokenization) only mean something next to
what the bare pipeline does on the same machine, with the same model, prompt and lengths.
The end-to-end benchmark imports these functions; ``bench.raw_genai`` is their CLI.

How: prompts are given as token ids (chat template applied once, exact length), generation
uses greedy decoding with ``ignore_eos`` so every request yields ``new_tokens`` tokens.

- ``LLMPipeline``: ``generate(ids, config, streamer)``; a ``StreamerBase`` subclass stamps
  the arrival of each token. TTFT = first token - call start.
- ``ContinuousBatchingPipeline``: ``add_request`` for every concurrent request, then one
  ``step()`` loop; after each step every handle with ``can_read()`` is ``read()`` (only the
  tokens new since the previous read) and stamped. This is the loop Sidelight's engine
  worker runs.

Figures are computed by ``bench.timing`` (shared with the llama.cpp and served benchmarks).
Everything here runs in the runtime venv (``.venv``); nothing imports torch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino_genai as ov_genai

from bench.timing import RunResult, TokenTracker

logger = logging.getLogger(__name__)

FILLER = (
    "Summarise the following notes about a small software project in three short bullet "
    "points, then list any open questions. The team moved the build to a single script, "
    "replaced the hand-written parser with a generated one, measured start-up time on "
    "three laptops, and found that the slowest step was loading the model from disk. "
    "They want to know whether caching compiled kernels helps, how much memory the cache "
    "takes, and whether users on battery should get a smaller model by default. "
)


# --- prompts -------------------------------------------------------------------------------


def make_prompt_ids(tokenizer: ov_genai.Tokenizer, n_tokens: int, salt: str) -> list[int]:
    """Return exactly ``n_tokens`` ids: chat-templated user turn, generation prompt appended.

    ``salt`` goes first in the user message so that different requests (and repetitions)
    share no prefix beyond the template's system turn: prefix caching must not make a
    repeated prompt look free.
    """
    marker = "\u2063"  # invisible separator: locates the user text inside the rendered template
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": marker}], add_generation_prompt=True
    )
    head, tail = rendered.split(marker)
    head_ids = _encode(tokenizer, head)
    tail_ids = _encode(tokenizer, tail)
    budget = n_tokens - len(head_ids) - len(tail_ids)
    if budget <= 0:
        raise ValueError(
            f"chat template alone takes {n_tokens - budget} tokens, more than {n_tokens}"
        )
    text = f"[{salt}] "
    body = _encode(tokenizer, text + FILLER)
    while len(body) < budget:
        text += FILLER
        body = _encode(tokenizer, text + FILLER)
    return head_ids + body[:budget] + tail_ids


def _encode(tokenizer: ov_genai.Tokenizer, text: str) -> list[int]:
    ids = tokenizer.encode(text, add_special_tokens=False).input_ids.data
    return [int(i) for i in ids[0]]


def _ids_tensor(ids: Sequence[int]) -> ov.Tensor:
    return ov.Tensor(np.asarray([ids], dtype=np.int64))


def greedy_config(new_tokens: int) -> ov_genai.GenerationConfig:
    """Greedy decoding that always produces ``new_tokens`` tokens."""
    config = ov_genai.GenerationConfig()
    config.max_new_tokens = new_tokens
    config.min_new_tokens = new_tokens
    config.ignore_eos = True
    config.do_sample = False
    return config


# --- pipelines -----------------------------------------------------------------------------


def scheduler_config(
    cache_size_gb: int = 1,
    max_num_batched_tokens: int | None = None,
    dynamic_split_fuse: bool = True,
    enable_prefix_caching: bool = True,
    max_num_seqs: int | None = None,
) -> ov_genai.SchedulerConfig:
    """A ``SchedulerConfig`` with the settings the benchmark varies; the rest stay default."""
    config = ov_genai.SchedulerConfig()
    config.cache_size = cache_size_gb
    config.dynamic_split_fuse = dynamic_split_fuse
    config.enable_prefix_caching = enable_prefix_caching
    if max_num_batched_tokens is not None:
        config.max_num_batched_tokens = max_num_batched_tokens
    if max_num_seqs is not None:
        config.max_num_seqs = max_num_seqs
    return config


def load_llm_pipeline(
    model: Path, properties: Mapping[str, Any] | None = None, device: str = "CPU"
) -> tuple[ov_genai.LLMPipeline, float]:
    """Load an ``LLMPipeline`` from an IR folder or a ``.gguf`` file; return it and the load seconds."""
    start = time.perf_counter()
    pipe = ov_genai.LLMPipeline(str(model), device, dict(properties or {}))
    return pipe, time.perf_counter() - start


def load_cb_pipeline(
    model: Path,
    scheduler: ov_genai.SchedulerConfig,
    properties: Mapping[str, Any] | None = None,
    device: str = "CPU",
) -> tuple[ov_genai.ContinuousBatchingPipeline, float]:
    """Load a ``ContinuousBatchingPipeline``; return it and the load seconds."""
    start = time.perf_counter()
    pipe = ov_genai.ContinuousBatchingPipeline(
        str(model), scheduler, device, dict(properties or {})
    )
    return pipe, time.perf_counter() - start


# --- measurements --------------------------------------------------------------------------


class _StampingStreamer(ov_genai.StreamerBase):  # type: ignore[misc]
    """Records when tokens arrive; never stops generation."""

    def __init__(self) -> None:
        super().__init__()
        self.stamps: list[tuple[float, int]] = []

    def write(self, token: int | Sequence[int]) -> ov_genai.StreamingStatus:
        count = 1 if isinstance(token, int) else len(token)
        self.stamps.append((time.perf_counter(), count))
        return ov_genai.StreamingStatus.RUNNING

    def end(self) -> None:
        pass


def measure_llm(
    pipe: ov_genai.LLMPipeline, prompt_ids: Sequence[int], new_tokens: int
) -> RunResult:
    """Generate once with a streamer; return the request's timing."""
    streamer = _StampingStreamer()
    start = time.perf_counter()
    result = pipe.generate(_ids_tensor(prompt_ids), greedy_config(new_tokens), streamer)
    end = time.perf_counter()
    tracker = TokenTracker(len(prompt_ids), start)
    for stamp, count in streamer.stamps:
        tracker.add(stamp, count)
    perf = result.perf_metrics
    metrics = {
        "genai_ttft_ms": float(perf.get_ttft().mean),
        "genai_tpot_ms": float(perf.get_tpot().mean),
        "genai_throughput_tps": float(perf.get_throughput().mean),
        "generate_call_s": end - start,
    }
    return RunResult.from_trackers([tracker], metrics)


def measure_cb(
    pipe: ov_genai.ContinuousBatchingPipeline,
    prompts: Sequence[Sequence[int]],
    new_tokens: int,
    first_request_id: int = 0,
) -> RunResult:
    """Submit all prompts at once and drive ``step()`` until every request finished."""
    config = greedy_config(new_tokens)
    start = time.perf_counter()
    handles: list[tuple[ov_genai.GenerationHandle, TokenTracker]] = []
    for offset, ids in enumerate(prompts):
        handle = pipe.add_request(first_request_id + offset, _ids_tensor(ids), config)
        handles.append((handle, TokenTracker(len(ids), start)))
    steps = 0
    while pipe.has_non_finished_requests():
        pipe.step()
        steps += 1
        now = time.perf_counter()
        for handle, tracker in handles:
            if handle.can_read():
                tracker.add(now, sum(len(out.generated_ids) for out in handle.read().values()))
    now = time.perf_counter()
    for handle, tracker in handles:  # tokens produced by the last step
        while handle.can_read():
            tracker.add(now, sum(len(out.generated_ids) for out in handle.read().values()))
        status = handle.get_status()
        if status != ov_genai.GenerationStatus.FINISHED:
            logger.warning("request ended with status %s", status)
    metrics = pipe.get_metrics()
    extra = {"steps": float(steps), "max_cache_usage_pct": float(metrics.max_cache_usage)}
    return RunResult.from_trackers([tracker for _, tracker in handles], extra)
