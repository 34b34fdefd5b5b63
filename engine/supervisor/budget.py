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

import functools
import logging
from pathlib import Path

import psutil

from engine.devices import DeviceInfo, describe
from engine.models import ModelSpec
from engine.settings import Settings
from engine.supervisor.kinds import kind_of

logger = logging.getLogger(__name__)

MB = 1024 * 1024

# What a worker costs with OpenVINO GenAI imported and nothing loaded (measured by
# bench/lifecycle_bench.py: ~17 MB USS idle, ~40 MB more with GenAI; rounded up for the
# runtime's plugin and thread pools once a model is compiled).
WORKER_BASE_MB = 150

# The reserve auto mode leaves for the OS and other apps: the larger of these.
RESERVE_MIN_MB = 2048
RESERVE_FRACTION = 0.25

# What a discrete GPU keeps for the display and the driver: the larger of these.
GPU_RESERVE_MIN_MB = 512
GPU_RESERVE_FRACTION = 0.10


def total_ram_mb() -> int:
    """The machine's physical memory (MB)."""
    return int(psutil.virtual_memory().total // MB)


def budget_mb(settings: Settings, device: DeviceInfo | None = None) -> int:
    """The memory the loaded models may hold together (MB) when placing one on ``device``.

    ``Settings.memory_budget_mb`` when set; otherwise (0, auto) the total RAM minus a
    reserve for the OS and other apps: the larger of :data:`RESERVE_MIN_MB` and
    :data:`RESERVE_FRACTION` of RAM (a 16 GB laptop gets 12 GB). For a model placed on a
    GPU that reports its memory, the lower of that and :func:`gpu_budget_mb`: an
    integrated GPU's models live in the same RAM, capped by what its driver may share; a
    discrete GPU must hold the weights and KV cache in its own memory.
    """
    if settings.memory_budget_mb > 0:
        return settings.memory_budget_mb
    total = total_ram_mb()
    reserve = max(RESERVE_MIN_MB, int(total * RESERVE_FRACTION))
    ram = max(0, total - reserve)
    gpu = gpu_budget_mb(device) if device is not None else None
    return ram if gpu is None else min(ram, gpu)


def gpu_budget_mb(device: DeviceInfo) -> int | None:
    """What models may hold on ``device`` (MB), from OpenVINO's ``GPU_DEVICE_TOTAL_MEM_SIZE``
    (:attr:`DeviceInfo.memory_bytes`); None for a CPU/NPU or a GPU that does not say.

    An integrated GPU reports the system memory its driver may share with it: all of it is
    usable (the RAM reserve already keeps room for the OS). A discrete GPU keeps the
    larger of :data:`GPU_RESERVE_MIN_MB` and :data:`GPU_RESERVE_FRACTION` for the display.
    """
    if device.kind != "gpu" or not device.memory_bytes:
        return None
    total = int(device.memory_bytes // MB)
    if device.device_type == "integrated":
        return total
    return max(0, total - max(GPU_RESERVE_MIN_MB, int(total * GPU_RESERVE_FRACTION)))


@functools.lru_cache(maxsize=8)
def device_info(device: str) -> DeviceInfo | None:
    """The description of GPU ``device`` as OpenVINO gives it, read once per device (None
    for other devices: only a GPU's memory changes the budget). Any thread."""
    if not device.upper().startswith("GPU"):
        return None
    return describe(device.upper())


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
    kv = int(settings.kv_cache_gb * 1024) if kind_of(spec.task).kv_cache else 0
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
