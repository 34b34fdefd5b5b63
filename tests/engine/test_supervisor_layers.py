"""The engine client's split into engine/supervisor modules (issue 11) keeps its contracts.

Pure data checks, no worker process: every way a request can end is counted in the status
(a finish reason added to the worker's protocol without a count would raise on the pipe's
reader).
"""

from __future__ import annotations

from typing import get_args

from engine.supervisor import routing, states
from engine.worker.messages import FinishReason


def test_every_finish_reason_is_counted() -> None:
    assert set(routing.OUTCOMES) == set(get_args(FinishReason))
    assert set(routing.OUTCOMES.values()) == set(get_args(states.RequestOutcome))
