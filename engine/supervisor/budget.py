"""How much memory the loaded models may hold, and what one model costs.

The scheduler (:mod:`engine.supervisor.scheduler`) keeps models loaded side by side while
their costs fit :func:`budget_mb`. A model's cost is its worker process's memory as measured
after load (:func:`measured_mb`: the resident set of the worker, which holds the weights,
the KV cache and the runtime), and before that an estimate from its files
(:func:`estimated_mb`), so a model that has never run is still planned for.

Plain functions over psutil and the file system: safe on any thread; :func:`measured_mb`
and :func:`estimated_mb` read the system (cheap, but call them off the event loop when a
folder may be large).
"""

from __future__ import annotations

import logging
from pathlib import Path

import psutil

from engine.models import ModelSpec
from engine.settings import Settings

logger = logging.getLogger(__name__)

MB = 1024 * 1024

# What a worker costs with OpenVINO GenAI imported and nothing loaded (measured by
# bench/lifecycle_bench.py: ~17 MB USS idle, ~40 MB more with GenAI; rounded up for the
# runtime's plugin and thread pools once a model is compiled).
WORKER_BASE_MB = 150

# The reserve auto mode leaves for the OS and other apps: the larger of these.
RESERVE_MIN_MB = 2048
RESERVE_FRACTION = 0.25


def total_ram_mb() -> int:
    """The machine's physical memory (MB)."""
    return int(psutil.virtual_memory().total // MB)


def budget_mb(settings: Settings) -> int:
    """The memory the loaded models may hold together (MB).

    ``Settings.memory_budget_mb`` when set; otherwise (0, auto) the total RAM minus a
    reserve for the OS and other apps: the larger of :data:`RESERVE_MIN_MB` and
    :data:`RESERVE_FRACTION` of RAM (a 16 GB laptop gets 12 GB).
    """
    if settings.memory_budget_mb > 0:
        return settings.memory_budget_mb
    total = total_ram_mb()
    reserve = max(RESERVE_MIN_MB, int(total * RESERVE_FRACTION))
    return max(0, total - reserve)


def files_mb(path: Path) -> int:
    """Bytes on disk of a model file or folder (MB, links not followed; 0 when missing)."""
    try:
        if path.is_file():
            return int(path.stat().st_size // MB)
        files = (p for p in path.rglob("*") if p.is_file() and not p.is_symlink())
        return int(sum(p.stat().st_size for p in files) // MB)
    except OSError:
        return 0


def estimated_mb(spec: ModelSpec, settings: Settings) -> int:
    """What ``spec`` will cost once loaded, before it ever was (MB): its weights on disk,
    the KV-cache budget for a chat model, and a worker's own base."""
    kv = int(settings.kv_cache_gb * 1024) if spec.task == "chat" else 0
    return files_mb(spec.path) + kv + WORKER_BASE_MB


def measured_mb(pid: int | None) -> int | None:
    """The resident memory of worker ``pid`` (MB), or None when it is gone or unknown.

    RSS, not USS: reading USS walks every mapping (slow for a big model) and the worker's
    shared pages are its own OpenVINO libraries, which leave with it anyway.
    """
    if pid is None:
        return None
    try:
        return int(psutil.Process(pid).memory_info().rss // MB)
    except (psutil.Error, OSError):
        return None
