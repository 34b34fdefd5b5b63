"""Compatibility names: the engine client now lives in :mod:`engine.supervisor` (issue 11).

``from engine.client import EngineClient, READY, ...`` keeps working for the server, the
desktop, tests and benchmarks; new code may import from :mod:`engine.supervisor.client`,
:mod:`engine.supervisor.streams` and :mod:`engine.supervisor.states` directly. Nothing here
runs: the module only re-exports.
"""

from __future__ import annotations

from engine.supervisor.client import EngineClient
from engine.supervisor.core import MAX_CONSECUTIVE_CRASHES
from engine.supervisor.states import (
    ERROR,
    IDLE,
    LOADING,
    READY,
    RESTARTING,
    STARTING,
    STOPPED,
    EngineIncident,
    EngineState,
    EngineStatus,
    EngineUnavailable,
    RequestFailed,
)
from engine.supervisor.streams import RequestStream

__all__ = [
    "ERROR",
    "IDLE",
    "LOADING",
    "MAX_CONSECUTIVE_CRASHES",
    "READY",
    "RESTARTING",
    "STARTING",
    "STOPPED",
    "EngineClient",
    "EngineIncident",
    "EngineState",
    "EngineStatus",
    "EngineUnavailable",
    "RequestFailed",
    "RequestStream",
]
