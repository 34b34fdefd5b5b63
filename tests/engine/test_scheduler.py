"""The scheduler in process, on real workers and the tiny models (no server).

Each model gets a worker of its own; the default model's view (engine.runtime.DefaultModel)
keeps the one-model status; a model evicted (or unloaded) between the pipeline's lookup and
its submit is loaded again rather than failing; an explicit unload refuses while a request
runs (held in flight by stopping its worker with SIGSTOP, as a debugger would, until
SIGCONT).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest

from engine.models import ModelSpec, spec_from_path
from engine.runtime import DefaultModel, Runtime
from engine.runtime import default_model as default_model_module
from engine.settings import Settings, load_settings
from engine.supervisor.budget import WORKER_BASE_MB, estimated_mb
from engine.supervisor.scheduler import Scheduler
from engine.supervisor.states import ERROR, IDLE, READY, STOPPED, EngineStatus, EngineUnavailable
from engine.worker.messages import SamplingParams
from tests.conftest import ROOT, TINY_CODER
from tests.engine.held import collect_unloading_after_lookup, finish_reason, held_request

GREEDY = SamplingParams(temperature=0)


def _runtime(settings: Settings) -> Runtime:
    """A started runtime: its scheduler, and the default model's view over it."""
    settings.paths.ensure()
    runtime = Runtime(settings)
    runtime.start()
    return runtime


@pytest.fixture
def runtime(sidelight_home: Path) -> Iterator[Runtime]:
    runtime = _runtime(load_settings({"SIDELIGHT_HOME": str(sidelight_home)}))
    yield runtime
    runtime.close()


@pytest.fixture
def scheduler(runtime: Runtime) -> Scheduler:
    return runtime.scheduler


@pytest.fixture
def default(runtime: Runtime) -> DefaultModel:
    return runtime.default


def test_each_model_has_its_own_worker_and_the_default_view_stays(
    scheduler: Scheduler, default: DefaultModel, tiny_model: Path
) -> None:
    demo = spec_from_path(tiny_model)
    default.load(demo)
    assert default.wait_for({READY}, 120).state == READY
    coder = spec_from_path(TINY_CODER, model_id="tiny-coder")
    client = scheduler.acquire(coder, None, 120)
    assert client.status().state == READY
    models = {m.id: m for m in scheduler.loaded()}
    assert set(models) == {demo.id, "tiny-coder"}
    assert models[demo.id].default and not models["tiny-coder"].default
    assert models[demo.id].worker_pid != models["tiny-coder"].worker_pid
    assert all(m.memory_mb and not m.memory_estimated for m in models.values())
    status = default.status()  # the default model's, as /health's top level shows it
    assert status.model is not None and status.model.id == demo.id
    assert scheduler.running(" TINY-CODER ") is client  # ids: any case, spaces trimmed
    assert scheduler.unload("tiny-coder")
    assert {m.id for m in scheduler.loaded()} == {demo.id}
    assert scheduler.running("tiny-coder") is None


def test_a_model_evicted_between_lookup_and_submit_is_loaded_again(
    runtime: Runtime, scheduler: Scheduler, default: DefaultModel, tiny_model: Path
) -> None:
    from engine.server.pipeline import Pipeline

    default.load(spec_from_path(tiny_model))
    assert default.wait_for({READY}, 120).state == READY
    old_pid = default.status().worker_pid
    reply, unloaded = collect_unloading_after_lookup(
        Pipeline(runtime.engine), lambda name: scheduler.unload(name, "evicted")
    )
    assert unloaded == [True]
    assert reply.done.finish_reason in ("stop", "length")
    assert reply.done.usage.completion_tokens > 0
    assert default.status().worker_pid not in (None, old_pid)


def test_unload_refuses_while_a_request_runs(
    scheduler: Scheduler, default: DefaultModel, tiny_model: Path
) -> None:
    default.load(spec_from_path(tiny_model))
    assert default.wait_for({READY}, 120).state == READY

    async def run() -> tuple[bool, str]:
        client = scheduler.running("sidelight-demo")
        assert client is not None
        async with held_request(client, 300) as stream:
            refused = await asyncio.to_thread(scheduler.unload, "sidelight-demo")
        reason = await finish_reason(stream)
        return refused, reason

    refused, reason = asyncio.run(run())
    assert refused is False and reason == "length"
    assert {m.id for m in scheduler.loaded()} == {"sidelight-demo"}


def _spare_of_default(scheduler: Scheduler) -> int:
    """Unload the default model the way its idle timer does (the client's own release):
    its client starts a spare worker with no model, which stays. Returns that worker's pid."""
    client = scheduler.running("sidelight-demo")
    assert client is not None
    assert client.release("idle")
    status = client.wait_for({IDLE}, 120)
    assert status.state == IDLE and status.model is None and status.worker_pid is not None
    return status.worker_pid


def _ended(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_former_default_models_spare_worker_ends_when_another_model_is_the_default(
    scheduler: Scheduler, default: DefaultModel, tiny_model: Path
) -> None:
    """The default model's spare worker (kept after an idle unload so the next request
    loads it there) must end once another model becomes the default: nothing else ever
    ends it, and /api/ps and the tray never show it."""
    default.load(spec_from_path(tiny_model))
    assert default.wait_for({READY}, 120).state == READY
    spare = _spare_of_default(scheduler)
    default.load(spec_from_path(TINY_CODER, model_id="tiny-coder"))
    status = default.wait_for({READY}, 120)
    assert status.state == READY and status.model is not None
    assert status.model.id == "tiny-coder"
    assert _ended(spare)
    assert scheduler.active_requests() == 0


def test_a_spare_worker_costs_what_it_holds_not_its_models_estimate(
    sidelight_home: Path, tiny_model: Path
) -> None:
    """A worker that holds no model (the default's spare after an idle unload) counts its
    measured memory in the budget, not the unloaded model's estimate with its KV cache:
    else a model that fits evicts it and the tray says the (already unloaded) default model
    "made room for another model"."""
    settings = load_settings({"SIDELIGHT_HOME": str(sidelight_home)})
    coder = spec_from_path(TINY_CODER, model_id="tiny-coder")
    # Room for the coder and an empty worker, not for two models' KV-cache budgets.
    room = estimated_mb(coder, settings) + WORKER_BASE_MB * 3
    runtime = _runtime(replace(settings, memory_budget_mb=room))
    scheduler = runtime.scheduler
    try:
        runtime.default.load(spec_from_path(tiny_model))
        assert runtime.default.wait_for({READY}, 120).state == READY
        spare = _spare_of_default(scheduler)
        assert scheduler.acquire(coder, None, 120).status().state == READY
        evicted = [e for e in scheduler.recent_unloads() if e.reason == "evicted"]
        assert evicted == []
        assert not _ended(spare)
    finally:
        runtime.close()


def test_no_worker_starts_after_close_while_a_load_evicts(
    sidelight_home: Path, tiny_model: Path
) -> None:
    """close() while a load is closing the model it evicts (a worker takes a moment to
    exit): the new model's worker must not start afterwards, left running with nobody to
    end it. The close is made to happen then by a status listener on the evicted model."""
    # A budget nothing fits in: the first model loads anyway, the next evicts it.
    settings = load_settings({"SIDELIGHT_HOME": str(sidelight_home)})
    runtime = _runtime(replace(settings, memory_budget_mb=1))
    scheduler = runtime.scheduler
    runtime.default.load(spec_from_path(tiny_model))
    assert runtime.default.wait_for({READY}, 120).state == READY
    victim = scheduler.running("sidelight-demo")
    assert victim is not None
    closed: list[bool] = []

    def close_once(status: EngineStatus) -> None:
        if status.state == STOPPED and not closed:
            closed.append(True)
            scheduler.close()

    victim.add_listener(close_once)
    before = {p.pid for p in psutil.Process().children()}
    try:
        with pytest.raises(EngineUnavailable):
            scheduler.acquire(spec_from_path(TINY_CODER, model_id="tiny-coder"), None, 120)
    finally:
        runtime.close()
    assert closed == [True]
    started = [p for p in psutil.Process().children() if p.pid not in before]
    assert all(_ended(p.pid) for p in started), started


def test_an_embedding_model_unloaded_between_lookup_and_request_is_loaded_again(
    scheduler: Scheduler,
) -> None:
    """An embedding model evicted (or unloaded) after :meth:`Scheduler.acquire` gave its
    worker, before the request reached it, is loaded again, as a chat request is: the
    request never fails for another model's eviction. The unload is made to happen right
    after the first lookup by wrapping ``acquire``."""
    spec = ModelSpec(
        "tiny-embed", ROOT / "tests" / "fixtures" / "tiny-embed", "ir", task="embeddings"
    )
    acquire = scheduler.acquire
    unloaded: list[bool] = []

    def acquire_then_unload(*args: Any, **kwargs: Any) -> Any:
        client = acquire(*args, **kwargs)
        if not unloaded:
            unloaded.append(scheduler.unload("tiny-embed", "evicted", "evicted"))
        return client

    scheduler.acquire = acquire_then_unload  # type: ignore[method-assign]
    result = asyncio.run(scheduler.embed(spec, ["hello", "world"]))
    assert unloaded == [True]
    assert len(result.vectors) == 2 and all(result.vectors)
    assert {m.id for m in scheduler.loaded()} == {"tiny-embed"}


def test_a_model_loaded_again_in_its_spare_worker_makes_room_like_a_new_one(
    sidelight_home: Path, tiny_model: Path
) -> None:
    """The default model, unloaded for being idle (its spare worker kept), loads again in
    that worker on the next request: it needs its room again, so an idle model that leaves
    it no room is evicted instead of both being held past the memory budget."""
    settings = load_settings({"SIDELIGHT_HOME": str(sidelight_home)})
    demo = spec_from_path(tiny_model)
    coder = spec_from_path(TINY_CODER, model_id="tiny-coder")
    # Room for one model's estimate and an empty worker (~35 MB), not for a loaded model
    # (~150 MB) beside it.
    room = estimated_mb(demo, settings) + WORKER_BASE_MB // 2
    runtime = _runtime(replace(settings, memory_budget_mb=room))
    scheduler = runtime.scheduler
    try:
        runtime.default.load(demo)
        assert runtime.default.wait_for({READY}, 120).state == READY
        _spare_of_default(scheduler)
        assert scheduler.acquire(coder, None, 120).status().state == READY
        assert scheduler.acquire(demo, None, 120).status().state == READY
        assert {m.id for m in scheduler.loaded()} == {demo.id}
        gone = [(e.model_id, e.reason) for e in scheduler.recent_unloads()]
        assert ("tiny-coder", "evicted") in gone
    finally:
        runtime.close()


def test_a_second_request_while_the_first_starts_the_worker_waits_for_that_load(
    sidelight_home: Path, tiny_model: Path
) -> None:
    """Two requests for one model: the first reserves its slot and starts the worker (a
    first CPU load first asks OpenVINO for the CPU's name, which took seconds while the
    self-tune ran in the CI). The second, arriving in between, must wait for that load, not
    load the model again into a worker that is not running yet (it raised OSError, a 500).
    The first start is held on an event through the client factory, the one seam the
    scheduler offers; the clients themselves are real."""
    import threading
    import time

    from engine.supervisor.client import EngineClient

    settings = load_settings({"SIDELIGHT_HOME": str(sidelight_home)})
    settings = replace(settings, cpu=replace(settings.cpu, self_tune=False))
    go_on = threading.Event()

    class HeldClient(EngineClient):
        def cpu_properties(self) -> dict[str, Any]:
            go_on.wait(60)
            return super().cpu_properties()

    scheduler = Scheduler(settings, client_factory=HeldClient)
    scheduler.start()
    spec = spec_from_path(tiny_model)
    try:
        results: list[object] = []
        first = threading.Thread(target=lambda: results.append(scheduler.acquire(spec, None, 120)))
        first.start()
        for _ in range(6000):  # until the first request holds the slot (bounded)
            with scheduler._lock:
                if scheduler._slots:
                    break
            time.sleep(0.01)
        second: list[object] = []

        def again() -> None:
            try:
                second.append(scheduler.acquire(spec, None, 120))
            except Exception as exc:  # the defect: OSError from loading an unstarted worker
                second.append(exc)

        other = threading.Thread(target=again)
        other.start()
        other.join(2)  # it must be waiting for the first load, not failing
        assert not second, second
        go_on.set()
        first.join(120)
        other.join(120)
        assert len(results) == 1 and len(second) == 1
        assert second[0] is results[0], second
        assert results[0].status().state == READY  # type: ignore[attr-defined]
    finally:
        go_on.set()
        scheduler.close()


def test_a_default_model_that_could_not_be_placed_is_an_error_not_an_unload(
    sidelight_home: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A default model that never got its room was never loaded: the default model's view
    (engine.runtime.DefaultModel: /health, the tray) says "could not load <id>: <why>" in
    state ``error``, as a worker's own failed load does, not a healthy ``idle`` "<id> was
    unloaded". A default model loaded and then unloaded still says that. The room is held by a model whose request is in flight
    (its worker stopped with SIGSTOP) under a 1 MB budget; the placement's wait for room
    (at least ten minutes) is cut to nothing so no room comes at once."""
    monkeypatch.setattr(default_model_module, "PLACE_WAIT_SECONDS", 0.0)
    settings = load_settings({"SIDELIGHT_HOME": str(sidelight_home)})
    runtime = _runtime(replace(settings, memory_budget_mb=1, load_wait_seconds=0.0))
    scheduler, default = runtime.scheduler, runtime.default
    demo = spec_from_path(tiny_model)
    coder = spec_from_path(TINY_CODER, model_id="tiny-coder")

    async def place_beside_a_busy_model() -> EngineStatus:
        client = await asyncio.to_thread(scheduler.acquire, coder, None, 120)
        assert client.status().state == READY
        async with held_request(client, 300) as stream:
            default.load(demo)
            status = await asyncio.to_thread(default.wait_for, {ERROR, IDLE}, 120)
        assert await finish_reason(stream) == "length"
        return status

    try:
        status = asyncio.run(place_beside_a_busy_model())
        assert status.state == ERROR, status
        assert status.message is not None
        assert status.message.startswith(f"could not load {demo.id}: {demo.id} needs about")
        assert status.unloaded is None
        assert status.model is not None and status.model.id == demo.id

        monkeypatch.setattr(default_model_module, "PLACE_WAIT_SECONDS", 120.0)
        default.load(demo)  # the coder is idle now: evicted for it
        assert default.wait_for({READY, ERROR}, 120).state == READY
        assert default.release("idle")
        status = default.status()
        assert (status.state, status.unloaded) == (IDLE, "idle")
        assert status.message == f"{demo.id} was unloaded (idle)"
    finally:
        runtime.close()


def test_a_request_waiting_for_a_load_that_is_unloaded_loads_the_model_again(
    sidelight_home: Path, tiny_model: Path
) -> None:
    """Two requests wait for one model's load; it is unloaded meanwhile (the tray's Unload):
    its worker ends ``stopped``, which a wait for ``ready``/``error`` never saw, so both
    sat out the whole load wait and got a stopped worker. They must look the model up
    again and be served by one new worker. The waits are held until the unload through
    the client factory, the one seam the scheduler offers; the clients are real."""
    import threading

    from engine.supervisor.client import EngineClient

    settings = load_settings({"SIDELIGHT_HOME": str(sidelight_home)})
    settings = replace(settings, cpu=replace(settings.cpu, self_tune=False))
    arrived = threading.Semaphore(0)
    unloaded = threading.Event()

    class HeldClient(EngineClient):
        def wait_for(self, states: Any, timeout: float) -> EngineStatus:
            if not unloaded.is_set():  # a request waits for this load: hold it here
                arrived.release()
                unloaded.wait(60)
            return super().wait_for(states, timeout)

    scheduler = Scheduler(settings, client_factory=HeldClient)
    scheduler.start()
    spec = spec_from_path(tiny_model)
    results: list[object] = []

    def request() -> None:
        try:
            results.append(scheduler.acquire(spec, None, 120))
        except Exception as exc:
            results.append(exc)

    threads = [threading.Thread(target=request) for _ in range(2)]
    try:
        for thread in threads:  # the first starts the load, the second waits for it
            thread.start()
            assert arrived.acquire(timeout=60)
        with scheduler._lock:
            first = scheduler._slots[spec.id].client  # the worker both wait for
        assert scheduler.unload(spec.id)
        unloaded.set()
        for thread in threads:
            thread.join(180)
        assert len(results) == 2 and results[0] is results[1], results
        client = results[0]
        assert isinstance(client, EngineClient) and client is not first
        assert client.status().state == READY
        assert scheduler.running(spec.id) is client
    finally:
        unloaded.set()
        scheduler.close()
