"""End to end: what the engine refuses or survives is seen right over HTTP.

A real ``sidelight serve`` on the tiny model: a schema XGrammar cannot compile and a request
too deep to pass to the worker are 400s that leave nothing counted active; a worker that
crashed until its restarts were paused comes back when /health is asked; a frozen worker
is ``stalled`` in /health and /metrics until it answers again.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.server.harness import ServerProcess, running_server
from tests.waiting import wait_until

pytestmark = pytest.mark.slow
# ``server`` is the package's shared one (tests/server/conftest.py), which these tests only
# read; the crash test kills workers, so it starts a server of its own.


def _deep_tools(levels: int) -> list[dict[str, Any]]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return [{"type": "function", "function": {"name": "f", "parameters": schema}}]


def test_a_schema_the_engine_cannot_compile_is_a_400(
    server: ServerProcess, client: openai.OpenAI, model_id: str
) -> None:
    before = server.health().json()
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=a)"}}}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=model_id,
            messages=[{"role": "user", "content": "Hi"}],
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
        )
    body: dict[str, Any] = info.value.body  # type: ignore[assignment]
    assert body["param"] == "response_format" and body["code"] == "invalid_request", body
    assert "Lookahead" in body["message"] and ".cc:" not in body["message"]
    after = server.health().json()
    assert after["worker_pid"] == before["worker_pid"] and after["requests"]["active"] == 0


def test_a_request_too_deep_to_pass_to_the_engine_is_a_400(
    server: ServerProcess, model_id: str
) -> None:
    response = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={
            "model": model_id,
            "messages": [{"role": "user", "content": "Hi"}],
            "tools": _deep_tools(400),
        },
        timeout=60,
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "tools"
    health = server.health().json()
    assert health["status"] == "ready" and health["requests"]["active"] == 0


def test_health_brings_the_engine_back_after_repeated_crashes(
    tmp_path: Path, tiny_model: Path
) -> None:
    with running_server(tmp_path / "home", tiny_model) as proc:
        pid = proc.wait_ready()["worker_pid"]
        for _ in range(3):
            assert isinstance(pid, int)
            os.kill(pid, signal.SIGKILL)
            pid = _next_worker(proc, pid)
        body = proc.wait_ready(timeout=60)
        assert body["restarts"] == 3  # two automatic restarts, one after the pause
        last = body["last_error"]
        assert isinstance(last, dict) and last["exit_code"] == -signal.SIGKILL


def _next_worker(proc: ServerProcess, old: int) -> int:
    """Poll /health until a worker other than ``old`` serves (each poll may revive one)."""

    def new_pid() -> int | None:
        body = proc.health().json()
        if body["status"] == "ready" and body["worker_pid"] not in (None, old):
            return int(body["worker_pid"])
        return None

    return wait_until(new_pid, lambda: f"a new worker: {proc.health().json()}", 60, interval=0.2)


def test_a_frozen_worker_is_stalled_in_health_and_metrics_until_it_answers(
    tmp_path: Path, tiny_model: Path
) -> None:
    """SIGSTOP the worker with the watchdog's kill deadline far away (its default, 120 s):
    /health turns 503 ``stalled`` (top level and the model's row) and /metrics says so
    within ``stall_seconds`` and a ping interval; after SIGCONT it is ``ready`` again, the
    same worker, nothing restarted."""
    env = {"SIDELIGHT_STALL_SECONDS": "1"}
    with running_server(tmp_path / "home", tiny_model, env=env) as proc:
        pid = proc.wait_ready()["worker_pid"]
        assert isinstance(pid, int)
        stopped = True
        os.kill(pid, signal.SIGSTOP)
        try:
            frozen = wait_until(
                lambda: (r := proc.health()).json()["status"] == "stalled" and r,
                lambda: f"stalled in /health: {proc.health().json()}",
                60,
                interval=0.2,
            )
            body = frozen.json()
            # Stalled past 1 s; shown to a tenth, so 1.04 s reads 1.0.
            assert frozen.status_code == 503 and body["stalled_seconds"] >= 1
            assert body["worker_pid"] == pid and body["restarts"] == 0
            assert [m["state"] for m in body["models"]] == ["stalled"]
            metrics = httpx.get(f"{proc.base_url}/metrics", timeout=5).text
            assert 'sidelight_engine_state{state="stalled"} 1.0' in metrics
            assert 'sidelight_engine_state{state="ready"} 0.0' in metrics
            os.kill(pid, signal.SIGCONT)
            stopped = False
            body = proc.wait_ready(timeout=60)
            assert body["status"] == "ready" and body["stalled_seconds"] is None
            assert body["worker_pid"] == pid and body["restarts"] == 0
            assert [m["state"] for m in body["models"]] == ["ready"]
        finally:
            if stopped:
                os.kill(pid, signal.SIGCONT)
