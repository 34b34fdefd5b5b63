"""The engine client's split into engine/supervisor modules (issue 11) keeps its contracts.

Pure data checks, no worker process: the old import path names the very same objects, and
every way a request can end is counted in the status (a finish reason added to the worker's
protocol without a count would raise on the pipe's reader).
"""

from __future__ import annotations

from typing import get_args

import engine.client as compat
from engine.supervisor import client, core, routing, states, streams
from engine.worker.messages import FinishReason


def test_old_import_path_names_the_same_objects() -> None:
    assert compat.EngineClient is client.EngineClient
    assert compat.RequestStream is streams.RequestStream
    assert compat.MAX_CONSECUTIVE_CRASHES == core.MAX_CONSECUTIVE_CRASHES
    assert compat.READY is states.READY and compat.EngineStatus is states.EngineStatus
    for name in compat.__all__:
        assert hasattr(compat, name), name


def test_every_finish_reason_is_counted() -> None:
    assert set(routing.OUTCOMES) == set(get_args(FinishReason))
    assert set(routing.OUTCOMES.values()) == set(get_args(states.RequestOutcome))
