"""Security defaults of the real app, driven in-process (no model needed for most paths).

The engine client is real but not started, so generation routes answer 503; that is enough
to check Host checks, CORS, API keys, body limits and error shapes, which run before them.
What /health tells a client beyond loopback is checked on a real worker on the tiny model.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from engine.models import spec_from_path
from engine.runtime import Runtime
from engine.settings import Settings, load_settings
from engine.supervisor.states import ERROR, READY
from tests.waiting import wait_until


def make_settings(home: Path, **overrides: object) -> Settings:
    return load_settings({"SIDELIGHT_HOME": str(home)}).with_overrides(**overrides)


@pytest.fixture
async def client(sidelight_home: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = make_settings(sidelight_home, max_body_bytes=4096)
    runtime = Runtime(settings)
    try:
        transport = httpx.ASGITransport(app=runtime.build_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:11680") as c:
            yield c
    finally:
        runtime.close()


def assert_openai_error(response: httpx.Response, status: int) -> dict[str, object]:
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "Traceback" not in error["message"]
    return dict(error)


async def test_foreign_host_gets_403(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/models", headers={"Host": "evil.example:11680"})
    error = assert_openai_error(response, 403)
    assert error["code"] == "host_not_allowed"


@pytest.mark.parametrize("host", ["127.0.0.1:11680", "localhost:11680", "[::1]:11680", "localhost"])
async def test_loopback_hosts_pass(client: httpx.AsyncClient, host: str) -> None:
    response = await client.get("/v1/models", headers={"Host": host})
    assert response.status_code == 200


async def test_preflight_from_unlisted_origin_gets_no_grant(client: httpx.AsyncClient) -> None:
    headers = {
        "Origin": "https://evil.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type",
    }
    response = await client.options("/v1/chat/completions", headers=headers)
    assert "access-control-allow-origin" not in response.headers


@pytest.mark.parametrize(
    "origin", ["http://localhost:5173", "http://127.0.0.1:3000", "vscode-webview://abc123"]
)
async def test_preflight_from_allowed_origin_is_granted(
    client: httpx.AsyncClient, origin: str
) -> None:
    headers = {"Origin": origin, "Access-Control-Request-Method": "POST"}
    response = await client.options("/v1/chat/completions", headers=headers)
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == origin
    assert response.headers["access-control-allow-origin"] != "*"


async def test_body_over_the_limit_is_413(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/v1/chat/completions", content=b"x" * 5000, headers={"content-type": "application/json"}
    )
    assert_openai_error(response, 413)


async def test_invalid_json_is_400(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", content=b"{oops")
    assert "not valid JSON" in str(assert_openai_error(response, 400)["message"])


async def test_unknown_route_is_openai_shaped_404(client: httpx.AsyncClient) -> None:
    assert_openai_error(await client.get("/v1/nothing"), 404)


async def test_health_is_503_without_a_model(client: httpx.AsyncClient) -> None:
    response = await client.get("/health")
    assert response.status_code == 503
    assert response.json()["status"] == "stopped"


async def test_generation_without_engine_is_404_for_unknown_model(
    client: httpx.AsyncClient,
) -> None:
    body = {"model": "nope", "messages": [{"role": "user", "content": "hi"}]}
    error = assert_openai_error(await client.post("/v1/chat/completions", json=body), 404)
    assert error["param"] == "model"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 9},
            "temperature",
        ),
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
    ],
)
async def test_invalid_fields_are_400_naming_the_field(
    client: httpx.AsyncClient, body: dict[str, object], param: str
) -> None:
    error = assert_openai_error(await client.post("/v1/chat/completions", json=body), 400)
    assert error["param"] == param
    assert param in str(error["message"])


async def test_api_key_required_when_set(sidelight_home: Path) -> None:
    settings = make_settings(sidelight_home, api_key="s3cret")
    runtime = Runtime(settings)
    try:
        transport = httpx.ASGITransport(app=runtime.build_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            missing = await c.get("/v1/models")
            assert_openai_error(missing, 401)
            wrong = await c.get("/v1/models", headers={"Authorization": "Bearer nope"})
            assert_openai_error(wrong, 401)
            right = await c.get("/v1/models", headers={"Authorization": "Bearer s3cret"})
            assert right.status_code == 200
            assert (await c.get("/health")).status_code == 503  # open, but no model yet
    finally:
        runtime.close()


@pytest.mark.parametrize(
    "host",
    [
        "127.evil.example",
        "127.0.0.1.rebind.attacker.example",
        "127.0.0.1.nip.io:11680",
        "localhost.evil.example",
        "evil.localhost.example",
        "0.0.0.0:11680",
        "[::]:11680",
        "::1",  # an IPv6 Host must be bracketed
        "[::1",
        "[::1]x",
        "[127.0.0.1]",
        "127.0.0.1:port",
        "127.0.0.1:",
        "127.1",
        "",
    ],
)
async def test_hosts_that_only_look_local_get_403(client: httpx.AsyncClient, host: str) -> None:
    response = await client.get("/v1/models", headers={"Host": host})
    assert assert_openai_error(response, 403)["code"] == "host_not_allowed"


@pytest.mark.parametrize(
    "host",
    ["127.8.9.10:1", "LOCALHOST", "tray.localhost:8080", "[::1]", "[0:0:0:0:0:0:0:1]:80"],
)
async def test_every_loopback_form_passes(client: httpx.AsyncClient, host: str) -> None:
    assert (await client.get("/v1/models", headers={"Host": host})).status_code == 200


async def test_refusals_on_ollama_paths_use_ollamas_shape(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/tags", headers={"Host": "evil.example"})
    assert response.status_code == 403
    assert isinstance(response.json()["error"], str)


async def test_health_beyond_loopback_without_the_key_tells_only_the_status(
    sidelight_home: Path, tiny_model: Path
) -> None:
    """Bound to every interface with a key: /health from another machine without the key is
    ``{"status": ...}`` alone (same code), also for an engine whose restarts paused after
    crashes, which that probe never revives; the key holder and this machine see it all."""
    settings = make_settings(sidelight_home, host="0.0.0.0", api_key="s3cret")
    settings.paths.ensure()
    runtime = Runtime(settings)
    runtime.start()
    app = runtime.build_app()
    base = "http://203.0.113.1:11680"
    remote = httpx.ASGITransport(app=app, client=("203.0.113.7", 40000))
    local = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
    key = {"Authorization": "Bearer s3cret"}
    try:
        runtime.default.load(spec_from_path(tiny_model))
        assert runtime.default.wait_for({READY, ERROR}, 120).state == READY
        async with (
            httpx.AsyncClient(transport=remote, base_url=base) as anonymous,
            httpx.AsyncClient(transport=local, base_url=base) as here,
        ):
            response = await anonymous.get("/health")
            assert (response.status_code, response.json()) == (200, {"status": "ready"})
            full = (await anonymous.get("/health", headers=key)).json()
            assert full["models"] and full["worker_pid"] and "memory_budget_mb" in full
            assert (await here.get("/health")).json()["models"]  # loopback: no key needed

            # Crash it until restarts pause (the default window keeps them paused).
            while (status := runtime.default.status()).state != ERROR:
                pid = status.worker_pid
                assert pid is not None
                os.kill(pid, signal.SIGKILL)
                wait_until(
                    lambda old=pid: (
                        (s := runtime.default.status()).state == ERROR
                        or s.worker_pid not in (None, old)
                    ),
                    "a new worker or a pause",
                    60,
                )
            response = await anonymous.get("/health")
            assert (response.status_code, response.json()) == (503, {"status": "error"})
            assert "exit code" not in response.text
            after = runtime.default.status()
            assert after.state == ERROR and after.worker_pid is None  # not revived

            revived = await anonymous.get("/health", headers=key)  # the key holder may
            assert revived.json()["status"] in ("restarting", "loading", "ready")
            assert runtime.default.wait_for({READY}, 120).state == READY
    finally:
        runtime.close()
