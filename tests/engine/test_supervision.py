"""The client keeps a worker running: crashes, a hung worker, and requests that fail early;
the crash budget reopens on its own, and a model's crash history outlives its worker.

Real worker processes on the tiny model, real signals.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from engine.models import spec_from_path
from engine.runtime import Runtime
from engine.settings import load_settings
from engine.supervisor.client import EngineClient
from engine.supervisor.states import (
    ERROR,
    IDLE,
    READY,
    RESTARTING,
    EngineStatus,
    EngineUnavailable,
    RequestFailed,
)
from engine.worker.messages import Finished, GenerationRequest, TextDelta
from tests.conftest import ROOT, dialogue
from tests.engine.chat_beside import SHOWS_TEXT
from tests.engine.test_client import GREEDY, generate
from tests.waiting import wait_until

DEMO = ROOT / "resources" / "models" / "sidelight-demo"
HELLO = [{"role": "user", "content": "Hello"}]


def _client(home: Path, **env: str) -> EngineClient:
    settings = load_settings({"SIDELIGHT_HOME": str(home), **env})
    settings.paths.ensure()
    client = EngineClient(settings, backend="batched")
    client.start()
    client.load(spec_from_path(DEMO))
    status = client.wait_for({READY, ERROR}, 120)
    assert status.state == READY, status.message
    return client


def _kill_worker(client: EngineClient) -> EngineStatus:
    """SIGKILL the ready worker; return the status it settles in (ready again, or error)."""
    status = client.status()
    assert status.state == READY and status.worker_pid is not None
    os.kill(status.worker_pid, signal.SIGKILL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        now = client.wait_for({READY, ERROR}, 1)
        if now.worker_pid != status.worker_pid and now.state in (READY, ERROR):
            return now
    raise AssertionError(f"no new worker after the kill: {client.status()}")


def _hello_works(client: EngineClient, dialogues: dict[str, Any]) -> None:
    hello = dialogue(dialogues, "hello")
    assert asyncio.run(generate(client, messages=hello["messages"]))[0] == hello["reply"]


def test_crash_budget_pauses_restarts_but_never_for_good(
    sidelight_home: Path, dialogues: dict[str, Any]
) -> None:
    """Three crashes in a minute pause restarts; a request, a load or revive() (what /health
    calls) brings the worker and its model back, and the status says what happened."""
    client = _client(sidelight_home)
    try:
        assert _kill_worker(client).state == READY
        assert _kill_worker(client).state == READY
        paused = _kill_worker(client)
        assert paused.state == ERROR and paused.restarts == 2
        assert paused.message and "crashed 3 times in a minute" in paused.message
        assert paused.last_error is not None and paused.last_error.exit_code == -signal.SIGKILL
        health = paused.to_dict()
        assert health["last_error"]["exit_code"] == -signal.SIGKILL and health["restarts"] == 2
        assert "exit code -9" in health["last_error"]["message"] and health["last_error"]["at"]

        # The next request brings it back (and is told to retry meanwhile).
        with pytest.raises(EngineUnavailable) as info:
            asyncio.run(_submit(client))
        assert info.value.state == RESTARTING and info.value.retry_after
        assert client.wait_for({READY, ERROR}, 120).state == READY
        _hello_works(client, dialogues)

        # Crashing again within the minute pauses at once; a model switch starts afresh.
        assert _kill_worker(client).state == ERROR
        client.load(spec_from_path(DEMO))
        assert client.wait_for({READY, ERROR}, 120).state == READY
        _hello_works(client, dialogues)

        for _ in range(2):
            assert _kill_worker(client).state == READY
        assert _kill_worker(client).state == ERROR
        assert client.revive()
        status = client.wait_for({READY, ERROR}, 120)
        assert status.state == READY and status.model is not None
        assert not client.revive()  # nothing to revive when it runs
        _hello_works(client, dialogues)
    finally:
        client.close()


async def _submit(client: EngineClient) -> None:
    client.submit(GenerationRequest(messages=HELLO))


def test_watchdog_restarts_a_worker_that_stops_answering(
    sidelight_home: Path, dialogues: dict[str, Any]
) -> None:
    """SIGSTOP the worker mid-stream: after the bound the stream ends with an error, the
    status says so, and the worker is killed, restarted and its model reloaded."""
    client = _client(sidelight_home, SIDELIGHT_ENGINE_WATCHDOG_SECONDS="2")
    seen: list[EngineStatus] = []
    client.add_listener(seen.append)
    stopped: int | None = None
    try:
        time.sleep(3)  # an idle worker answers the pings: no false alarm
        first = client.status()
        assert first.state == READY and first.restarts == 0

        async def stream_until_stopped() -> tuple[Finished, float]:
            nonlocal stopped
            stream = client.submit(
                GenerationRequest(messages=HELLO, max_tokens=1900, sampling=SHOWS_TEXT)
            )
            async for event in stream:
                if isinstance(event, TextDelta) and stopped is None:
                    stopped = first.worker_pid
                    assert stopped is not None
                    os.kill(stopped, signal.SIGSTOP)
                    at = time.monotonic()
                elif isinstance(event, Finished):
                    return event, time.monotonic() - at
            raise AssertionError("no Finished event")

        ended, after = asyncio.run(asyncio.wait_for(stream_until_stopped(), 60))
        assert ended.finish_reason == "error" and ended.error
        assert "stopped answering" in ended.error
        assert 1.5 < after < 10
        restarting = [s for s in seen if s.state == RESTARTING and s.message]
        assert restarting and "stopped answering" in (restarting[0].message or ""), [
            (s.state, s.message) for s in seen
        ]
        status = client.wait_for({READY, ERROR}, 120)
        assert status.state == READY and status.restarts == 1 and status.worker_pid != stopped
        assert status.last_error and "stopped answering" in status.last_error.message
        assert status.active_requests == 0 and status.failed == 1
        with pytest.raises(ProcessLookupError):
            os.kill(stopped, 0)  # the hung worker is gone, not left stopped
        stopped = None
        _hello_works(client, dialogues)
    finally:
        if stopped is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped, signal.SIGKILL)
        client.close()


def _deep_tools(levels: int) -> list[dict[str, Any]]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return [{"type": "function", "function": {"name": "f", "parameters": schema}}]


def test_no_failure_leaves_a_request_counted_active(
    sidelight_home: Path, dialogues: dict[str, Any]
) -> None:
    client = _client(sidelight_home)

    async def paths() -> None:
        # A request that does not pickle is refused naming the field.
        stream = client.submit(GenerationRequest(messages=HELLO, tools=_deep_tools(600)))
        with pytest.raises(RequestFailed) as info:
            await stream.start()
        assert (info.value.code, info.value.param) == ("invalid_request", "tools")
        assert client.status().active_requests == 0
        # Refused by the worker: a prompt over the context (a max_tokens over the room left
        # is clipped to it, not refused).
        too_long = [{"role": "user", "content": "word " * 5000}]
        stream = client.submit(GenerationRequest(messages=too_long, max_tokens=10**6))
        with pytest.raises(RequestFailed) as refused:
            await stream.start()
        assert refused.value.code == "context_length_exceeded"
        assert client.status().active_requests == 0
        # Cancelled mid-stream.
        stream = client.submit(
            GenerationRequest(messages=HELLO, max_tokens=1900, sampling=SHOWS_TEXT)
        )
        async for event in stream:
            if isinstance(event, TextDelta):
                stream.cancel()
        assert stream.result and stream.result.finish_reason == "cancelled"
        assert client.status().active_requests == 0

    async def abandoned() -> None:
        # Left unread when its loop closes: the reader must survive the stream's end.
        client.submit(GenerationRequest(messages=HELLO, max_tokens=50, sampling=GREEDY))

    try:
        asyncio.run(paths())
        asyncio.run(abandoned())
        deadline = time.monotonic() + 30
        while client.status().active_requests and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.status().active_requests == 0
        _hello_works(client, dialogues)
    finally:
        client.close()


def _kill_until_paused(client: EngineClient) -> EngineStatus:
    """SIGKILL each new worker as soon as it has a pid (not waiting for its model), until
    restarts pause; return the paused status."""

    def paused_or_new_pid(old: int | None) -> EngineStatus | None:
        status = client.status()
        if status.state == ERROR or status.worker_pid not in (None, old):
            return status
        return None

    pid = client.status().worker_pid
    while True:
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        status = wait_until(lambda old=pid: paused_or_new_pid(old), "a new worker or a pause", 60)
        if status.state == ERROR:
            return status
        pid = status.worker_pid


def test_the_crash_budget_reopens_on_its_own(sidelight_home: Path) -> None:
    """Restarts paused after three crashes resume once the crash window has passed, with no
    request, no load and no /health: a metrics scrape sees the engine come back."""
    client = _client(sidelight_home, SIDELIGHT_CRASH_WINDOW_SECONDS="20")
    try:
        paused = _kill_until_paused(client)
        assert paused.restarts == 2 and paused.worker_pid is None
        back = wait_until(
            lambda: (s := client.wait_for({READY}, 1)).state == READY and s,
            lambda: f"ready again on its own: {client.status()}",
            120,
        )
        assert paused.message and "3 times in 20 s" in paused.message
        assert "starts again in 20 s" in paused.message
        assert back.restarts == 3 and back.worker_pid is not None
        assert back.last_error is not None and back.last_error.exit_code == -signal.SIGKILL
    finally:
        client.close()


def test_crash_history_survives_a_reload_of_the_model(sidelight_home: Path) -> None:
    """A model's restarts and last error outlive its worker: unloaded (the default view
    says so meanwhile) and loaded again in a new worker, /health still tells the crash."""
    settings = load_settings({"SIDELIGHT_HOME": str(sidelight_home)})
    settings.paths.ensure()
    runtime = Runtime(settings)
    runtime.start()
    spec = spec_from_path(DEMO)
    try:
        runtime.default.load(spec)
        assert runtime.default.wait_for({READY, ERROR}, 120).state == READY
        first = runtime.scheduler.client(spec.id)
        assert first is not None
        crashed = _kill_worker(first)
        assert crashed.state == READY and crashed.restarts == 1 and crashed.last_error
        assert runtime.scheduler.unload(spec.id)
        gone = runtime.default.status()
        assert gone.state == IDLE and gone.restarts == 1 and gone.last_error == crashed.last_error
        again = runtime.scheduler.acquire(spec, None, 120)
        assert again is not first
        status = again.wait_for({READY, ERROR}, 120)
        assert status.state == READY and status.restarts == 1
        assert status.last_error == crashed.last_error
        health = runtime.default.status().to_dict()
        assert health["restarts"] == 1 and health["last_error"]["exit_code"] == -signal.SIGKILL
    finally:
        runtime.close()
