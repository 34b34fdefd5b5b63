"""Validated sampling fields -> the engine's :class:`SamplingParams`, the same for every dialect.

The request models have already bounded each number to what the engine's C++ types hold;
this module gives the values their shared meanings:

- ``top_k`` of 0 or below switches top-k off (``-1`` in vLLM's extension, ``0`` in Ollama);
- a negative ``seed`` asks for a random one (``-1`` is Ollama's spelling; GenAI's seed is
  unsigned, so no negative value could be passed on);
- ``top_p`` 0 and ``min_p`` 1 keep only the most likely token. GenAI refuses both values
  (``top_p`` must be above 0, ``min_p`` below 1, after rounding to a float), so they become
  ``top_k`` 1, which means the same.
"""

from __future__ import annotations

from engine.server.fields import float32
from engine.worker.messages import SamplingParams


def sampling_params(
    *,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    min_p: float | None = None,
    seed: int | None = None,
    presence_penalty: float | None = None,
    frequency_penalty: float | None = None,
    repetition_penalty: float | None = None,
    ignore_eos: bool = False,
) -> SamplingParams:
    """The engine's sampling for these values (``None`` keeps the model's default)."""
    if top_k is not None and top_k <= 0:
        top_k = None
    if top_p is not None and float32(top_p) <= 0:
        top_p, top_k = None, 1
    if min_p is not None and float32(min_p) >= 1:
        min_p, top_k = None, 1
    return SamplingParams(
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        min_p=min_p,
        seed=seed if seed is not None and seed >= 0 else None,
        presence_penalty=presence_penalty,
        frequency_penalty=frequency_penalty,
        repetition_penalty=repetition_penalty,
        ignore_eos=ignore_eos,
    )
