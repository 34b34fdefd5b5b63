"""The request monitor on the real app, in-process: who may read ``/metrics`` and the request
log, what is kept of refused requests (never a key), and the log's bounds.

The engine client is real but not started (generation routes answer 503), which is all the
refusal paths need; the end-to-end tests (``test_monitor_e2e.py``) cover real generations.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.runtime import Runtime
from engine.server.monitor import RequestLog, RequestMonitor, curl_command
from engine.server.monitor.record import OpenRequest
from engine.settings import Settings, load_settings
from engine.supervisor.client import EngineClient

CHAT = {"model": "sidelight-demo", "messages": [{"role": "user", "content": "Hello"}]}


def make_settings(home: Path, **overrides: object) -> Settings:
    return load_settings({"SIDELIGHT_HOME": str(home)}).with_overrides(**overrides)


@asynccontextmanager
async def app_client(
    settings: Settings, client: tuple[str, int] = ("127.0.0.1", 50000)
) -> AsyncIterator[httpx.AsyncClient]:
    runtime = Runtime(settings)
    try:
        transport = httpx.ASGITransport(app=runtime.build_app(), client=client)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:11680") as c:
            yield c
    finally:
        runtime.close()


@pytest.fixture
async def keyed(sidelight_home: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = make_settings(sidelight_home, api_key="s3cret", keep_request_bodies=True)
    async with app_client(settings) as client:
        yield client


async def request_log(client: httpx.AsyncClient, **headers: str) -> dict[str, Any]:
    response = await client.get("/api/sidelight/requests", headers=headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_metrics_are_open_on_loopback_without_a_key(sidelight_home: Path) -> None:
    async with app_client(make_settings(sidelight_home)) as client:
        response = await client.get("/metrics")
    assert response.status_code == 200
    assert "sidelight_requests_in_flight 0.0" in response.text
    assert 'sidelight_engine_state{state="stopped"} 1.0' in response.text


async def test_metrics_and_the_log_need_the_key_when_one_is_set(
    keyed: httpx.AsyncClient,
) -> None:
    for path in ("/metrics", "/api/sidelight/requests"):
        assert (await keyed.get(path)).status_code == 401
        assert (await keyed.get(path, headers={"x-api-key": "s3cret"})).status_code == 200


async def test_a_refused_key_is_logged_but_never_kept(keyed: httpx.AsyncClient) -> None:
    wrong = await keyed.post(
        "/v1/chat/completions",
        json=CHAT,
        headers={"Authorization": "Bearer wrong-key-123", "User-Agent": "plugin/2.0"},
    )
    assert wrong.status_code == 401
    log = await request_log(keyed, authorization="Bearer s3cret")
    [entry] = log["data"]
    assert (entry["route"], entry["status"], entry["outcome"]) == (
        "/v1/chat/completions",
        401,
        "client_error",
    )
    assert entry["user_agent"] == "plugin/2.0"
    assert entry["error"].startswith("Incorrect or missing API key")
    assert entry["body"] is None and entry["curl"] is None  # refused before it was read

    right = await keyed.post("/v1/chat/completions", json=CHAT, headers={"x-api-key": "s3cret"})
    assert right.status_code == 404  # (no model in this store)
    log = await request_log(keyed, authorization="Bearer s3cret")
    entry = log["data"][-1]
    assert json.loads(entry["body"]) == CHAT  # bodies are on: kept
    assert '"x-api-key: $SIDELIGHT_API_KEY"' in entry["curl"]
    text = json.dumps(log)
    assert "wrong-key-123" not in text and "s3cret" not in text


async def test_the_log_answers_only_this_machine(sidelight_home: Path) -> None:
    settings = make_settings(sidelight_home, api_key="s3cret")
    async with app_client(settings, client=("192.168.1.20", 50000)) as client:
        headers = {"Authorization": "Bearer s3cret"}
        refused = await client.get("/api/sidelight/requests", headers=headers)
        assert refused.status_code == 403
        assert (await client.get("/metrics", headers=headers)).status_code == 200


async def test_without_keeping_bodies_there_is_no_body_and_no_curl(sidelight_home: Path) -> None:
    async with app_client(make_settings(sidelight_home)) as client:
        refused = await client.post("/api/chat", json=CHAT)  # an empty store: 404
        assert refused.status_code == 404
        log = await request_log(client)
    [entry] = log["data"]
    assert log["keep_bodies"] is False
    assert (entry["dialect"], entry["route"], entry["outcome"]) == (
        "ollama",
        "/api/chat",
        "client_error",
    )
    assert entry["requested_model"] == "sidelight-demo"
    assert entry["body"] is None and entry["curl"] is None
    assert "Hello" not in json.dumps(log)


async def test_routes_are_templates_and_oversized_bodies_are_logged(
    sidelight_home: Path,
) -> None:
    settings = make_settings(sidelight_home, max_body_bytes=4096, keep_request_bodies=True)
    async with app_client(settings) as client:
        await client.post("/api/no/such/thing", json={})
        await client.post("/v1/nothing-here", json={})
        await client.post("/v1/chat/completions", content=b"x" * 5000)
        await client.post("/v1/chat/completions", content=b'{"model": ')
        await client.get("/v1/models")  # listings are not logged
        log = await request_log(client)
    routes = [(e["route"], e["status"], e["body"]) for e in log["data"]]
    assert routes == [  # bodies nobody read (refused first) are not kept
        ("/api/{rest:path}", 404, None),
        ("unmatched", 404, None),
        ("/v1/chat/completions", 413, None),
        ("/v1/chat/completions", 400, '{"model": '),
    ]
    assert log["data"][3]["error"].startswith("the request body is not valid JSON")


def finished(log: RequestLog, body: str | None = None) -> None:
    request = OpenRequest(dialect="openai", method="POST", route="/v1/chat/completions")
    log.started(request)
    log.finished(request, 200, "ok", body)


def test_the_log_keeps_the_last_n_and_bounds_kept_bodies() -> None:
    log = RequestLog(capacity=3, body_budget=10)
    for _ in range(5):
        finished(log)
    assert [e.id for e in log.entries()] == [3, 4, 5]
    assert [e.id for e in log.entries(since=4)] == [5]
    finished(log, body="abcdef")  # 6 characters: kept
    finished(log, body="ghijkl")  # 12 in all: the older body goes
    assert [e.body for e in log.entries()] == [None, None, "ghijkl"]


async def test_turning_bodies_off_forgets_them(sidelight_home: Path) -> None:
    monitor = RequestMonitor(lambda: EngineClient(make_settings(sidelight_home)).status())
    monitor.set_keep_bodies(True)
    request = monitor.open(dialect="openai", method="POST", route="/v1/completions")
    entry = monitor.close(request, 200, body='{"prompt": "secret code"}')
    assert entry.body is not None
    monitor.set_keep_bodies(False)
    assert [e.body for e in monitor.log.entries()] == [None]
    assert curl_command(monitor.log.entries()[0]) is None
