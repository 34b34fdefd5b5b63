"""The engine's one front door (issue 21): what the CLI, the tray app and the end-to-end
tests all build, and the only engine package that composes the others.

:class:`Runtime` holds the store, the scheduler, the default model's view
(:class:`DefaultModel`), one request pipeline, the request monitor, the start-up chores
(:class:`StartupChores`) and the HTTP server. Layers, lowest first: ``engine.supervisor``
(workers and their placement) < ``engine.server`` (HTTP, over protocols) <
``engine.runtime`` < ``engine.cli`` and ``desktop``. Nothing imports upwards.
"""

from __future__ import annotations

from engine.runtime.chores import (
    StartupChores,
    TuneDisturbed,
    TuneTiming,
    finish_tune,
    tune_timing,
)
from engine.runtime.default_model import DefaultModel
from engine.runtime.runtime import Runtime
from engine.runtime.served import ServedEngine
from engine.runtime.voice import Said, say_pieces, transcribe
from engine.server.model_info import ModelInfo  # what the desktop lists of remote models

__all__ = [
    "DefaultModel",
    "ModelInfo",
    "Runtime",
    "Said",
    "ServedEngine",
    "StartupChores",
    "TuneDisturbed",
    "TuneTiming",
    "finish_tune",
    "say_pieces",
    "transcribe",
    "tune_timing",
]
