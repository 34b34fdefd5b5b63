"""Sidelight stores and sends no OpenVINO telemetry: nothing appears in ``~/intel``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, dialogue
from tests.server.harness import ServerProcess

pytestmark = pytest.mark.slow

# openvino_telemetry stays quiet in CI (CI=true and the like): clear those so the test sees
# what a user's machine does.
NOT_CI = {"CI": "", "TF_BUILD": "", "JENKINS_URL": ""}


def test_serving_the_demo_model_writes_no_telemetry(
    sidelight_home: Path, tmp_path: Path, tiny_model: Path, dialogues: dict[str, Any]
) -> None:
    """A real load and reply of the demo model in the server and its engine worker."""
    home = tmp_path / "user-home"
    home.mkdir()
    proc = ServerProcess(sidelight_home, tiny_model, env={"HOME": str(home), **NOT_CI})
    try:
        health = proc.wait_ready()
        assert health["status"] == "ready"
        hello = dialogue(dialogues, "hello")
        reply = httpx.post(
            f"{proc.base_url}/v1/chat/completions",
            json={"model": "sidelight-demo", "messages": hello["messages"]},
            timeout=60,
        )
        assert reply.json()["choices"][0]["message"]["content"] == hello["reply"]
    finally:
        assert proc.stop() == 0, proc.output()
    assert sorted(p.name for p in home.iterdir()) == []


def test_importing_openvino_after_engine_loads_no_telemetry(tmp_path: Path) -> None:
    """Any process that imports ``engine`` first (app, worker, bundle) keeps it off."""
    code = (
        "import sys, engine, openvino, openvino_genai, openvino_tokenizers; "
        "print(sys.modules['openvino_telemetry'])"
    )
    env = {"HOME": str(tmp_path), "PATH": "", "PYTHONPATH": str(ROOT), **NOT_CI}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "None"
    assert not (tmp_path / "intel").exists()
