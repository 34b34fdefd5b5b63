"""Unload idle models when the machine runs short of memory, or on battery (issue 11).

The memory budget (:mod:`engine.supervisor.budget`) is planned when a model loads; other
apps may grow afterwards. The scheduler's owner loop (``engine-scheduler``) asks a
:class:`PressureWatch` to read the system every :data:`CHECK_SECONDS`:

- while the memory the system has available (psutil's ``available``: free plus what the
  kernel can reclaim at once) is below :func:`pressure_threshold_mb`, it unloads one idle
  model per check (other models before the default one, least recently used first), so the
  next reading sees what that gave back;
- with ``Settings.unload_on_battery``, while the laptop runs on battery, it unloads every
  model idle for :data:`BATTERY_IDLE_SECONDS`.

Only models with no request in flight and no load under way are candidates, and the unload
itself is refused by the client while a request runs (:meth:`Scheduler.unload`): nothing is
ever cancelled. Each unload is an event with reason ``memory_pressure`` or ``on_battery``
(:mod:`engine.supervisor.unloads`), which the tray and ``/health`` show.

Threading: no thread of its own; :meth:`PressureWatch.check` runs on the scheduler's owner
loop, and may be called on any thread (tests). The system is read through the ``read`` function given, so tests inject
readings: real memory pressure and a laptop battery cannot be produced on a test machine.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

import psutil

from engine.settings import Settings
from engine.supervisor.unloads import UnloadReason

logger = logging.getLogger(__name__)

MB: Final = 1024 * 1024
CHECK_SECONDS: Final = 5.0  # how often the system is read
BATTERY_IDLE_SECONDS: Final = 60.0  # on battery, a model idle this long unloads
# Auto threshold: this share of RAM, within these bounds (a 16 GB laptop: ~820 MB).
AUTO_FRACTION: Final = 0.05
AUTO_MIN_MB: Final = 512
AUTO_MAX_MB: Final = 2048


@dataclass(frozen=True)
class SystemReading:
    """What the watch decides on: memory available now and whether on battery."""

    available_mb: int
    total_mb: int
    on_battery: bool


def read_system() -> SystemReading:
    """The real readings (psutil). No battery, or one whose plug state is unknown, counts
    as mains power."""
    memory = psutil.virtual_memory()
    battery = psutil.sensors_battery() if hasattr(psutil, "sensors_battery") else None
    on_battery = battery is not None and battery.power_plugged is False
    return SystemReading(int(memory.available // MB), int(memory.total // MB), on_battery)


def pressure_threshold_mb(settings: Settings, total_mb: int) -> int | None:
    """Below this much available memory (MB) idle models unload; None when turned off.

    ``Settings.memory_pressure_mb`` when positive; 0 (auto) is :data:`AUTO_FRACTION` of
    RAM within [:data:`AUTO_MIN_MB`, :data:`AUTO_MAX_MB`]; negative turns it off.
    """
    if settings.memory_pressure_mb < 0:
        return None
    if settings.memory_pressure_mb > 0:
        return settings.memory_pressure_mb
    return max(AUTO_MIN_MB, min(AUTO_MAX_MB, int(total_mb * AUTO_FRACTION)))


class IdleModels(Protocol):
    """What the watch asks of the scheduler (:class:`engine.supervisor.scheduler.Scheduler`)."""

    def idle_models(self) -> list[tuple[str, float]]: ...

    def unload(self, model_id: str, reason: str = ..., cause: UnloadReason = ...) -> bool: ...


class PressureWatch:
    """Unloads idle models of ``scheduler`` under memory pressure or on battery.

    Args:
        scheduler: whose idle models to unload.
        settings: ``memory_pressure_mb``, ``unload_on_battery``.
        read: the system readings (tests inject them).
        interval: seconds between checks.
        battery_idle_seconds: how long a model must be idle to unload on battery.
    """

    def __init__(
        self,
        scheduler: IdleModels,
        settings: Settings,
        *,
        read: Callable[[], SystemReading] = read_system,
        interval: float = CHECK_SECONDS,
        battery_idle_seconds: float = BATTERY_IDLE_SECONDS,
    ) -> None:
        self._scheduler = scheduler
        self._settings = settings
        self._read = read
        self._interval = interval
        self._battery_idle = battery_idle_seconds

    @property
    def enabled(self) -> bool:
        """Whether there is anything to check (both checks can be turned off)."""
        return self._settings.memory_pressure_mb >= 0 or self._settings.unload_on_battery

    @property
    def interval(self) -> float:
        """Seconds between checks."""
        return self._interval

    def check(self) -> list[str]:
        """Read the system once and unload what it calls for; returns the models unloaded
        (blocks while their workers exit)."""
        reading = self._read()
        threshold = pressure_threshold_mb(self._settings, reading.total_mb)
        if threshold is not None and reading.available_mb < threshold:
            why = (
                f"{reading.available_mb} MB of memory available, below {threshold} MB "
                "(memory_pressure_mb)"
            )
            for model_id, _ in self._scheduler.idle_models():
                if self._scheduler.unload(model_id, why, "memory_pressure"):
                    return [model_id]  # one at a time: read again once it gave memory back
            return []
        if not (self._settings.unload_on_battery and reading.on_battery):
            return []
        gone = []
        for model_id, idle in self._scheduler.idle_models():
            if idle >= self._battery_idle and self._scheduler.unload(
                model_id, f"on battery, idle {idle:.0f} s", "on_battery"
            ):
                gone.append(model_id)
        return gone
