"""Speculative decoding figures per model, for ``/health``: how many tokens were guessed
and accepted, in how many engine steps, and the decode rate.

GenAI's continuous-batching ``step()`` does not say how many tokens it guessed for a
request, only what each step produced; so the figures are what can be counted exactly:
``accepted_tokens`` (tokens beyond one per step) and ``tokens_per_step`` (1.0 without
speculation). ``tokens_per_step`` bounds the speed-up from above: a step that checks guessed
tokens costs a little more than a plain one.

Threading: recorded on the loop serving requests; read from any thread (a lock guards it).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.server.pipeline.events import Done


@dataclass
class _ModelFigures:
    speculation: str = "off"
    requests: int = 0
    completion_tokens: int = 0
    decode_steps: int = 0
    accepted_tokens: int = 0
    decode_tokens: int = 0  # tokens after each request's first (the rate's numerator)
    decode_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        steps = self.decode_steps
        return {
            "speculation": self.speculation,
            "requests": self.requests,
            "completion_tokens": self.completion_tokens,
            "accepted_tokens": self.accepted_tokens,
            "decode_steps": steps,
            "accepted_share": round(self.accepted_tokens / self.completion_tokens, 3)
            if self.completion_tokens
            else None,
            "tokens_per_step": round(self.completion_tokens / steps, 3) if steps else None,
            "tokens_per_second": round(self.decode_tokens / self.decode_seconds, 2)
            if self.decode_seconds > 0
            else None,
        }


class SpeculationStats:
    """Totals since the server started, per model id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._models: dict[str, _ModelFigures] = {}

    def record(self, model_id: str | None, done: Done) -> None:
        timings = done.timings
        if model_id is None or timings.decode_steps <= 0:
            return  # nothing decoded (refused, cancelled before the first token)
        with self._lock:
            figures = self._models.setdefault(model_id, _ModelFigures())
            figures.speculation = timings.speculation
            figures.requests += 1
            figures.completion_tokens += done.usage.completion_tokens
            figures.decode_steps += timings.decode_steps
            figures.accepted_tokens += timings.accepted_tokens
            if timings.decode_seconds:
                figures.decode_tokens += max(done.usage.completion_tokens - 1, 0)
                figures.decode_seconds += timings.decode_seconds

    def to_dict(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {model: figures.to_dict() for model, figures in self._models.items()}
