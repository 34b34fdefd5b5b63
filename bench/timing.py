"""Engine-neutral timing records: per-request TTFT and decode speed, per-run aggregates.

Shared by the raw OpenVINO GenAI measurements, the llama.cpp measurements and (later) the
served end-to-end benchmark, so all three compute their figures the same way:

- TTFT = first token arrival - submit time;
- decode tokens/s = (tokens - tokens that arrived with the first) / (last arrival - first arrival);
- aggregate tokens/s of a run = all tokens of all requests / (last arrival - submit time).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class RequestTiming:
    """What one generation request looked like from the caller's side."""

    prompt_tokens: int
    generated_tokens: int
    ttft_ms: float
    decode_tps: float
    total_s: float


@dataclass(frozen=True)
class RunResult:
    """One repetition: one request or several submitted at once."""

    requests: list[RequestTiming]
    wall_s: float
    aggregate_tps: float
    extra: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_trackers(
        cls, trackers: list[TokenTracker], extra: dict[str, float] | None = None
    ) -> RunResult:
        start = min(t.submitted for t in trackers)
        end = max(t.last for t in trackers)
        total = sum(t.tokens for t in trackers)
        wall = end - start
        return cls(
            [t.timing() for t in trackers],
            wall,
            total / wall if wall > 0 else float("nan"),
            extra or {},
        )


class TokenTracker:
    """Collects token arrival times of one request; feed it with ``add(now, count)``."""

    def __init__(self, prompt_tokens: int, submitted: float) -> None:
        self.prompt_tokens = prompt_tokens
        self.submitted = submitted
        self.first: float | None = None
        self.first_count = 0  # tokens that arrived with the first: prefill output, not decode
        self.last = submitted
        self.tokens = 0

    def add(self, now: float, count: int) -> None:
        if count <= 0:
            return
        if self.first is None:
            self.first = now
            self.first_count = count
        self.last = now
        self.tokens += count

    def timing(self) -> RequestTiming:
        first = self.first if self.first is not None else self.last
        decode_s = self.last - first
        return RequestTiming(
            prompt_tokens=self.prompt_tokens,
            generated_tokens=self.tokens,
            ttft_ms=(first - self.submitted) * 1000,
            decode_tps=(self.tokens - self.first_count) / decode_s
            if decode_s > 0
            else float("nan"),
            total_s=self.last - self.submitted,
        )
