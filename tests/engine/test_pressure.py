"""Idle models unload under memory pressure or on battery: the real scheduler, real workers
and the tiny models.

The system readings are injected (``PressureWatch(read=...)``): real memory pressure and a
laptop battery cannot be produced on a test machine. Everything else is real: the models
are loaded in their own workers, a model with a request in flight is held there by
stopping its worker with SIGSTOP (as a debugger would) until SIGCONT, and the unloads end
real worker processes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from engine.models import spec_from_path
from engine.runtime import Runtime
from engine.settings import Settings, SettingsError, load_settings
from engine.supervisor.pressure import PressureWatch, SystemReading, pressure_threshold_mb
from engine.supervisor.scheduler import Scheduler
from engine.supervisor.states import READY
from tests.conftest import TINY_CODER
from tests.engine.held import finish_reason, held_request

CODER = "tiny-coder"
LOW = SystemReading(available_mb=100, total_mb=16384, on_battery=False)
PLENTY = SystemReading(available_mb=8000, total_mb=16384, on_battery=False)
BATTERY = SystemReading(available_mb=8000, total_mb=16384, on_battery=True)


@pytest.fixture
def settings(sidelight_home: Path) -> Settings:
    settings = load_settings({"SIDELIGHT_HOME": str(sidelight_home)})
    settings.paths.ensure()
    return settings


@pytest.fixture
def runtime(settings: Settings, tiny_model: Path) -> Iterator[Runtime]:
    """The demo model (the default) and the code model, both loaded and idle."""
    runtime = Runtime(settings)
    runtime.start()
    runtime.default.load(spec_from_path(tiny_model))
    assert runtime.default.wait_for({READY}, 120).state == READY
    coder = spec_from_path(TINY_CODER, model_id=CODER)
    assert runtime.scheduler.acquire(coder, None, 120).status().state == READY
    yield runtime
    runtime.close()


@pytest.fixture
def scheduler(runtime: Runtime) -> Scheduler:
    return runtime.scheduler


def _watch(
    scheduler: Scheduler, settings: Settings, readings: list[SystemReading]
) -> PressureWatch:
    return PressureWatch(scheduler, settings, read=lambda: readings[0], battery_idle_seconds=0)


def _loaded(scheduler: Scheduler) -> set[str]:
    return {m.id for m in scheduler.loaded()}


def test_memory_pressure_unloads_idle_models_one_at_a_time_default_last(
    runtime: Runtime, scheduler: Scheduler, settings: Settings
) -> None:
    readings = [PLENTY]
    watch = _watch(scheduler, settings, readings)
    assert watch.check() == []
    assert _loaded(scheduler) == {"sidelight-demo", CODER}

    readings[0] = LOW
    coder_pid = scheduler.running(CODER).status().worker_pid  # type: ignore[union-attr]
    assert watch.check() == [CODER]  # not the default model while another one can go
    assert _loaded(scheduler) == {"sidelight-demo"}
    assert coder_pid is not None and not _alive(coder_pid)
    assert watch.check() == ["sidelight-demo"]
    assert _loaded(scheduler) == set()
    assert watch.check() == []

    events = scheduler.recent_unloads()
    assert [(e.model_id, e.reason) for e in events] == [
        (CODER, "memory_pressure"),
        ("sidelight-demo", "memory_pressure"),
    ]
    assert "100 MB of memory available, below 819 MB" in events[0].message
    status = runtime.default.status()  # the default model is out, healthy, and says why
    assert status.state == "idle" and status.unloaded == events[1].message


def test_a_model_with_a_request_in_flight_is_never_unloaded(
    scheduler: Scheduler, settings: Settings
) -> None:
    watch = _watch(scheduler, settings, [LOW])
    client = scheduler.running("sidelight-demo")
    assert client is not None

    async def run() -> tuple[list[str], list[str], str]:
        async with held_request(client, 64) as stream:
            first = await asyncio.to_thread(watch.check)
            second = await asyncio.to_thread(watch.check)
        reason = await finish_reason(stream)
        return first, second, reason

    first, second, reason = asyncio.run(run())
    assert first == [CODER]  # the idle one goes
    assert second == []  # the busy default model stays, however low memory is
    assert reason == "length"  # and its reply ended normally
    assert _loaded(scheduler) == {"sidelight-demo"}


def test_on_battery_unloads_idle_models_only_when_asked(
    scheduler: Scheduler, settings: Settings
) -> None:
    assert _watch(scheduler, settings, [BATTERY]).check() == []  # off by default
    assert _loaded(scheduler) == {"sidelight-demo", CODER}
    on = replace(settings, unload_on_battery=True)
    assert _watch(scheduler, on, [PLENTY]).check() == []  # on mains power
    assert sorted(_watch(scheduler, on, [BATTERY]).check()) == ["sidelight-demo", CODER]
    assert _loaded(scheduler) == set()
    assert {e.reason for e in scheduler.recent_unloads()} == {"on_battery"}


def test_threshold_setting(settings: Settings) -> None:
    """Plain arithmetic: auto is 5 % of RAM within 512 MB..2 GB; negative is off."""
    base = settings
    assert pressure_threshold_mb(base, 16384) == 819
    assert pressure_threshold_mb(base, 4096) == 512
    assert pressure_threshold_mb(base, 131072) == 2048
    assert pressure_threshold_mb(replace(base, memory_pressure_mb=3000), 16384) == 3000
    assert pressure_threshold_mb(replace(base, memory_pressure_mb=-1), 16384) is None


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_settings_are_read_and_checked(sidelight_home: Path) -> None:
    env = {
        "SIDELIGHT_HOME": str(sidelight_home),
        "SIDELIGHT_MEMORY_PRESSURE_MB": "-1",
        "SIDELIGHT_UNLOAD_ON_BATTERY": "true",
    }
    settings = load_settings(env)
    assert (settings.memory_pressure_mb, settings.unload_on_battery) == (-1, True)
    settings.validate()
    defaults = load_settings({"SIDELIGHT_HOME": str(sidelight_home)})
    assert (defaults.memory_pressure_mb, defaults.unload_on_battery) == (0, False)
    with pytest.raises(SettingsError, match="memory_pressure_mb"):
        load_settings({**env, "SIDELIGHT_MEMORY_PRESSURE_MB": "lots"})
    with pytest.raises(SettingsError, match="memory_pressure_mb"):
        load_settings({**env, "SIDELIGHT_MEMORY_PRESSURE_MB": "99999999"}).validate()
