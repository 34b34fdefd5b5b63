"""A model's own settings on a real server: set through the API and the CLI, used by requests.

The demo model (greedy by its generation_config) is stored as
``demo-copy``; the server's default model is the shipped demo, so ``demo-copy`` loads on its
first request, with the settings saved before it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from engine.settings import load_settings
from tests.conftest import ROOT, dialogue
from tests.server.harness import ServerProcess, running_server, store_ir_copy
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

MODEL = "demo-copy"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    home = tmp_path_factory.mktemp("model-settings-home")
    models = load_settings({"SIDELIGHT_HOME": str(home)}).paths.models_dir
    models.mkdir(parents=True)
    store_ir_copy(models, MODEL, tiny_model, task="chat", reasoning=False)
    return home


@pytest.fixture(scope="module")
def server(home: Path, tiny_model: Path) -> Iterator[ServerProcess]:
    with running_server(home, tiny_model) as proc:
        yield proc


def settings_url(server: ServerProcess, model: str = MODEL) -> str:
    return f"{server.base_url}/api/sidelight/models/{model}/settings"


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SIDELIGHT_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", "settings", *args],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_bad_changes_are_400s_naming_the_field_and_change_nothing(server: ServerProcess) -> None:
    for body, field in (
        ({"temperature": "hot"}, "temperature"),
        ({"context_length": 10**6}, "context_length"),  # over the model's 2048
        ({"colour": "red"}, "colour"),
    ):
        answer = httpx.post(settings_url(server), json=body, timeout=10)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["param"] == field
    missing = httpx.get(settings_url(server, "no-such-model"), timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "model"
    assert httpx.get(settings_url(server), timeout=10).json()["settings"] == {}


def test_a_models_temperature_and_context_are_what_requests_get(
    server: ServerProcess, dialogues: dict[str, Any]
) -> None:
    saved = httpx.post(
        settings_url(server),
        json={"temperature": 1.5, "seed": 42, "context_length": 512},
        timeout=10,
    )
    assert saved.status_code == 200, saved.text
    assert saved.json()["settings"] == {"temperature": 1.5, "seed": 42, "context_length": 512}
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0)
    messages = dialogue(dialogues, "fallback-03")["messages"]

    def ask(**fields: Any) -> str:
        fields.setdefault("messages", messages)
        # Past its end token the model is on ground it was never trained on, where sampling
        # has choices to make; on the reply itself it is too sure of each token to show it.
        reply = client.chat.completions.create(
            model=MODEL, max_tokens=48, extra_body={"ignore_eos": True}, **fields
        )
        return reply.choices[0].message.content or ""

    # The model is greedy by its generation_config: leaving temperature and seed out now
    # samples as the model's settings say, the same as asking for them explicitly.
    sampled = ask(temperature=1.5, seed=42)
    assert sampled != ask(temperature=0)
    assert [ask(), ask()] == [sampled, sampled]
    listed = {m["id"]: m for m in httpx.get(f"{server.base_url}/v1/models").json()["data"]}
    assert listed[MODEL]["context_length"] == 512  # served with the model's own cap
    with pytest.raises(openai.BadRequestError) as refused:
        ask(messages=[{"role": "user", "content": "word " * 700}])
    assert "512" in str(refused.value)


def test_keep_alive_setting_unloads_the_model_after_its_request(
    server: ServerProcess, home: Path
) -> None:
    result = cli(home, MODEL, "keep_alive_seconds=0")
    assert result.returncode == 0, result.stderr
    assert "keep_alive_seconds = 0.0" in result.stdout
    answer = httpx.post(
        f"{server.base_url}/api/generate",
        json={"model": MODEL, "prompt": "Hi", "stream": False, "options": {"num_predict": 2}},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text

    def unloaded() -> list[Any]:
        events = server.health().json().get("unloaded_models") or []
        return [e for e in events if e.get("id") == MODEL]

    events = wait_until(
        unloaded, lambda: f"{MODEL} unloaded: {server.health().json()}", 20, interval=0.1
    )
    assert events[-1]["reason"] == "keep_alive", events
    models = httpx.get(f"{server.base_url}/api/ps", timeout=5).json()["models"]
    assert f"{MODEL}:latest" not in [m["name"] for m in models]
    bad = cli(home, MODEL, "top_p=7")
    assert bad.returncode == 2 and "top_p" in bad.stderr
    reset = cli(home, MODEL, "--reset", "--json")
    assert reset.returncode == 0 and '"settings": {}' in reset.stdout
