"""``sidelight serve`` as a person runs it: clear errors, clean exits, keys off loopback."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.server.harness import ServerProcess, free_port

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
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
                if health.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        assert health.json()["model"] == "sidelight-demo"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert "no display here" in err and "demo model" in err
