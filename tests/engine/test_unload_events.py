"""Why a model went away: the scheduler's unload events, on real workers and tiny models.

Each way a model leaves memory is produced for real (no server): ``keep_alive 0`` on an idle
model, an unload by hand, eviction by a model that does not fit the memory budget beside
it, and a crash (the worker is killed with SIGKILL, as the OOM killer would). Every one
reaches the listener once and the bounded recent list (``/health`` ``unloaded_models``)
with its typed reason.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.models import spec_from_path
from engine.runtime import Runtime
from engine.settings import load_settings
from engine.supervisor.scheduler import Scheduler
from engine.supervisor.states import READY
from engine.supervisor.unloads import UnloadEvent, UnloadLog
from tests.conftest import TINY_CODER


def _runtime(home: Path, **config: str) -> Runtime:
    env = {"SIDELIGHT_HOME": str(home), **config}
    settings = load_settings(env)
    settings.paths.ensure()
    runtime = Runtime(settings)
    runtime.start()
    return runtime


@pytest.fixture
def runtime(sidelight_home: Path) -> Iterator[Runtime]:
    runtime = _runtime(sidelight_home)
    yield runtime
    runtime.close()


@pytest.fixture
def scheduler(runtime: Runtime) -> Scheduler:
    return runtime.scheduler


def _wait_events(heard: list[UnloadEvent], count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while len(heard) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(heard) >= count, heard


def test_each_way_a_model_goes_is_recorded_once_with_its_reason(
    runtime: Runtime, scheduler: Scheduler, tiny_model: Path
) -> None:
    heard: list[UnloadEvent] = []
    scheduler.add_unload_listener(heard.append)
    demo = spec_from_path(tiny_model)
    coder = spec_from_path(TINY_CODER, model_id="tiny-coder")
    runtime.default.load(demo)
    assert runtime.default.wait_for({READY}, 120).state == READY

    client = scheduler.acquire(coder, None, 120)
    client.set_keep_alive(0)  # as an Ollama request's keep_alive 0 does, once idle
    _wait_events(heard, 1)
    assert (heard[0].model_id, heard[0].reason) == ("tiny-coder", "keep_alive")

    scheduler.acquire(coder, None, 120)
    assert scheduler.unload("tiny-coder", "unloaded from the tray")
    _wait_events(heard, 2)
    assert (heard[1].reason, heard[1].message) == ("requested", "unloaded from the tray"), heard

    client = scheduler.acquire(coder, None, 120)
    pid = client.status().worker_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    _wait_events(heard, 3)
    assert (heard[2].model_id, heard[2].reason) == ("tiny-coder", "crashed")
    assert "exit code -9" in heard[2].message
    assert heard[2].text() == f"tiny-coder stopped: {heard[2].message}"
    assert client.wait_for({READY}, 120).state == READY  # it restarts on its own

    time.sleep(0.5)  # no second event for the same crash or the restart's statuses
    assert len(heard) == 3
    recent = scheduler.recent_unloads()
    assert [e.reason for e in recent] == ["keep_alive", "requested", "crashed"]
    body = recent[0].to_dict()
    assert set(body) == {"id", "reason", "message", "at"}
    assert body["id"] == "tiny-coder" and body["at"].endswith("+00:00")


def test_eviction_names_the_model_that_needed_the_room(
    sidelight_home: Path, tiny_model: Path
) -> None:
    runtime = _runtime(sidelight_home, SIDELIGHT_MEMORY_BUDGET_MB="1")
    scheduler = runtime.scheduler
    try:
        heard: list[UnloadEvent] = []
        scheduler.add_unload_listener(heard.append)
        runtime.default.load(spec_from_path(tiny_model))
        assert runtime.default.wait_for({READY}, 120).state == READY
        coder = spec_from_path(TINY_CODER, model_id="tiny-coder")
        assert scheduler.acquire(coder, None, 120).status().state == READY
        _wait_events(heard, 1)
        assert [(e.model_id, e.reason, e.message) for e in heard] == [
            ("sidelight-demo", "evicted", "evicted for tiny-coder")
        ]
        assert "made room for another model" in heard[0].text()
    finally:
        runtime.close()


def test_the_recent_list_is_bounded() -> None:
    """Plain data (no model needed): the oldest events drop off past the bound."""
    log = UnloadLog(keep=3)
    for n in range(5):
        log.record(f"m{n}", "idle", "idle")
    assert [e.model_id for e in log.recent()] == ["m2", "m3", "m4"]


def test_an_unload_by_hand_says_how_once() -> None:
    """Issue 28, defect 12: the tray read "unloaded: unloaded on request (unloaded fro…"."""
    tray = UnloadEvent("qwen3-4b", "requested", "unloaded from the tray", 0.0)
    assert tray.text() == "qwen3-4b was unloaded from the tray"
    assert UnloadEvent("m", "requested", "unloaded", 0.0).text() == "m was unloaded on request"
    moved = UnloadEvent("m", "requested", "the model folder changed", 0.0)
    assert moved.text() == "m was unloaded: the model folder changed"
    idle = UnloadEvent("m", "idle", "idle", 0.0)
    assert idle.text() == "m was unloaded: idle"
