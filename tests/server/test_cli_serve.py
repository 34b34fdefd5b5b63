"""``sidelight serve`` as a person runs it: clear errors, clean exits, keys off loopback."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import dialogue
from tests.server.harness import ServerProcess, free_port, running_server
from tests.waiting import wait_until

pytestmark = pytest.mark.slow


def serve(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"SIDELIGHT_HOME": str(home), "PATH": ""}
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", "serve", *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_port_in_use_is_a_clear_error(sidelight_home: Path, tiny_model: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = serve(sidelight_home, "--model", str(tiny_model), "--port", str(port))
    assert result.returncode == 1
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr


def test_missing_model_is_a_clear_error(sidelight_home: Path, tmp_path: Path) -> None:
    result = serve(sidelight_home, "--model", str(tmp_path / "nothing-here"))
    assert result.returncode == 2
    assert "nothing-here" in result.stderr


def test_leaving_loopback_needs_a_key(sidelight_home: Path, tiny_model: Path) -> None:
    result = serve(sidelight_home, "--model", str(tiny_model), "--host", "0.0.0.0")
    assert result.returncode == 2
    assert "API key" in result.stderr


def test_sigint_exits_cleanly_and_stops_the_worker(sidelight_home: Path, tiny_model: Path) -> None:
    import psutil

    proc = ServerProcess(sidelight_home, tiny_model)
    health = proc.wait_ready()
    worker = psutil.Process(int(str(health["worker_pid"])))
    assert "ready:" in proc.output() and "/v1" in proc.output()
    proc.process.send_signal(signal.SIGINT)
    assert proc.process.wait(30) == 0, proc.output()
    assert proc.stop() == 0  # already exited; closes the output file
    worker.wait(10)
    assert not worker.is_running()
    assert "exited unexpectedly" not in proc.output()


def test_api_key_on_the_real_server(sidelight_home: Path, tiny_model: Path) -> None:
    port = free_port()
    proc = ServerProcess(sidelight_home, tiny_model, "--api-key", "k3y", port=port)
    try:
        proc.wait_ready()
        url = f"{proc.base_url}/v1/models"
        assert httpx.get(url).status_code == 401
        assert httpx.get(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert httpx.get(url, headers={"Authorization": "Bearer k3y"}).status_code == 200
    finally:
        assert proc.stop() == 0, proc.output()


def test_no_subcommand_without_a_display_serves_the_demo(sidelight_home: Path) -> None:
    """The README's run command on a headless machine: the tray cannot open, so serve."""
    port = free_port()
    env = {"SIDELIGHT_HOME": str(sidelight_home), "SIDELIGHT_PORT": str(port), "PATH": ""}
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli"], env=env, stderr=subprocess.PIPE, text=True
    )

    def ready() -> httpx.Response | None:
        try:
            health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
        except httpx.HTTPError:
            return None
        return health if health.status_code == 200 else None

    try:
        health = wait_until(ready, "the headless launch serving", 120, interval=0.2)
        assert health.json()["model"] == "sidelight-demo"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert "no display here" in err and "demo model" in err


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The one ``sidelight: ...`` line of a failed run (log lines may come before it)."""
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("sidelight: ")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def test_an_empty_api_key_is_an_error_not_no_key(sidelight_home: Path, tiny_model: Path) -> None:
    result = serve(sidelight_home, "--model", str(tiny_model), "--api-key", "")
    assert result.returncode == 2
    assert "API key is empty" in one_line_error(result)


@pytest.mark.parametrize("key", [" ", "two words", "ключ"])
def test_an_api_key_no_header_can_carry_is_an_error(
    sidelight_home: Path, tiny_model: Path, key: str
) -> None:
    result = serve(sidelight_home, "--model", str(tiny_model), "--api-key", key)
    assert result.returncode == 2
    assert "API key" in one_line_error(result)


def test_a_name_that_looks_like_loopback_needs_a_key(
    sidelight_home: Path, tiny_model: Path
) -> None:
    """``127.evil.example`` is a DNS name, not a loopback address."""
    result = serve(sidelight_home, "--model", str(tiny_model), "--host", "127.evil.example")
    assert result.returncode == 2
    assert "API key" in one_line_error(result)


def test_an_unresolvable_host_is_one_line(sidelight_home: Path, tiny_model: Path) -> None:
    args = ("--model", str(tiny_model), "--host", "127.evil.example", "--api-key", "k")
    result = serve(sidelight_home, *args)
    assert result.returncode == 1
    assert "cannot listen on 127.evil.example" in one_line_error(result)


def test_a_malformed_host_is_one_line(sidelight_home: Path, tiny_model: Path) -> None:
    result = serve(sidelight_home, "--model", str(tiny_model), "--host", "no such host!")
    assert result.returncode == 2
    assert "host must be an IP address or a host name" in one_line_error(result)


def test_bound_beyond_loopback_any_host_with_the_key(
    sidelight_home: Path, tiny_model: Path
) -> None:
    """LAN clients send the machine's LAN address as Host; the key is the guard there."""
    port = free_port()
    proc = ServerProcess(
        sidelight_home, tiny_model, "--host", "0.0.0.0", "--api-key", "k3y", port=port
    )
    try:
        proc.wait_ready()
        url = f"{proc.base_url}/v1/models"
        lan = {"Host": f"192.168.1.50:{port}"}
        assert httpx.get(url, headers=lan).status_code == 401
        ok = httpx.get(url, headers={**lan, "Authorization": "Bearer k3y"})
        assert ok.status_code == 200
        evil = {"Host": "evil.example", "Authorization": "Bearer k3y"}
        assert httpx.get(url, headers=evil).status_code == 200  # the key, not the name, decides
        # The URL printed for clients is one they can connect to, never 0.0.0.0.
        assert f"OpenAI base URL: http://127.0.0.1:{port}/v1" in proc.output()
    finally:
        assert proc.stop() == 0, proc.output()


def test_first_serve_self_tunes_caches_and_explicit_settings_win(
    sidelight_home: Path, tiny_model: Path
) -> None:
    """Real self-tune on the demo model at first start; /health shows what the model got."""
    import json

    from engine.settings import load_settings

    cache = load_settings({"SIDELIGHT_HOME": str(sidelight_home)}).paths.cache_dir
    on = {"SIDELIGHT_CPU_SELF_TUNE": "true"}
    with running_server(sidelight_home, tiny_model, env=on) as server:
        health = server.wait_ready()
    props = health["cpu_properties"]
    assert isinstance(props, dict) and props["ENABLE_CPU_PINNING"] is False
    saved = json.loads((cache / "cpu-tune.json").read_text())
    (entry,) = saved.values()
    assert entry["properties"] in [c for c, _ in entry["figures"]]  # one of the candidates
    assert {k: props[k] for k in entry["properties"]} == entry["properties"]  # it was used

    tuned_at = entry["tuned_at"]
    forced = {**on, "SIDELIGHT_CPU_THREADS": "1", "SIDELIGHT_CPU_KV_CACHE_PRECISION": "u8"}
    with running_server(sidelight_home, tiny_model, env=forced) as server:
        health = server.wait_ready()
    props = health["cpu_properties"]
    assert isinstance(props, dict)
    assert props["INFERENCE_NUM_THREADS"] == 1 and props["KV_CACHE_PRECISION"] == "u8"
    again = json.loads((cache / "cpu-tune.json").read_text())
    assert [e["tuned_at"] for e in again.values()] == [tuned_at]  # cached, not re-tuned


def test_a_request_during_the_first_start_self_tune_waits_never_404(
    sidelight_home: Path, dialogues: dict[str, Any]
) -> None:
    """``sidelight serve`` on a fresh home tunes the CPU before it loads the default model
    (real tune, real demo model): a chat request sent as soon as the server answers, while
    the tune runs, must wait for the load or be told to retry (503 model_loading), never
    get 404. The default model is known from the first /health on."""
    chat = dialogue(dialogues, "hello")
    proc = ServerProcess(sidelight_home, None, env={"SIDELIGHT_CPU_SELF_TUNE": "true"})
    try:
        first = proc.wait_answering()
        assert first.json()["model"] == "sidelight-demo", first.text
        body = {"model": "sidelight-demo", "messages": chat["messages"], "max_tokens": 200}
        url = f"{proc.base_url}/v1/chat/completions"
        response = httpx.post(url, json=body, timeout=120)
        for _ in range(60):  # bounded: each 503 says how long to wait
            if response.status_code != 503:
                break
            assert response.json()["error"]["code"] == "model_loading", response.text
            time.sleep(int(response.headers["Retry-After"]))
            response = httpx.post(url, json=body, timeout=120)
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["message"]["content"] == chat["reply"]
        assert "CPU self-tune on " in proc.output()  # it tuned (no cached choice)
    finally:
        assert proc.stop() == 0, proc.output()


def test_stopping_during_the_first_start_self_tune_exits_cleanly(sidelight_home: Path) -> None:
    """SIGTERM as soon as a fresh server answers (real self-tune running): it exits 0 once
    the tune's measurement ends, instead of waiting for a load that never comes or aborting
    while the tune's thread is inside OpenVINO."""
    proc = ServerProcess(sidelight_home, None, env={"SIDELIGHT_CPU_SELF_TUNE": "true"})
    try:
        proc.wait_answering()
        proc.process.send_signal(signal.SIGTERM)
        assert proc.process.wait(120) == 0, proc.output()
    finally:
        proc.stop()
    assert "terminate called" not in proc.output() and "Traceback" not in proc.output()
