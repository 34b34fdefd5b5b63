"""Speculative decoding through HTTP: the response ``timings`` and ``/health`` show it.

A real ``sidelight serve`` on the tiny demo model with prompt lookup on (the test harness
turns it off for stream-shape tests), one with the setting off, and ``auto`` (the product's
default) following the CPU self-tune's measure of what guesses cost on this machine.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine import cpu_tune
from engine.settings import load_settings
from tests.server.harness import ServerProcess, running_server

HELLO = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("serve-home")
    with running_server(home, tiny_model, env={"SIDELIGHT_PROMPT_LOOKUP": "1"}) as proc:
        yield proc


def _chat(server: ServerProcess, messages: list[dict[str, str]], **extra: Any) -> Any:
    body = {"model": "sidelight-demo", "messages": messages, "temperature": 0, **extra}
    response = httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def test_timings_and_health_show_accepted_guesses(server: ServerProcess) -> None:
    first = _chat(server, HELLO, max_tokens=40)
    reply = first["choices"][0]["message"]["content"]
    # The greeting again: the model repeats its reply, which the prompt now holds.
    again = [*HELLO, {"role": "assistant", "content": reply}, *HELLO]
    answer = _chat(server, again, max_tokens=40)
    timings = answer["timings"]
    assert timings["speculation"] == "prompt_lookup"
    assert timings["draft_n_accepted"] > 0
    assert timings["decode_steps"] + timings["draft_n_accepted"] == timings["predicted_n"]
    figures = server.health().json()["speculation"]["sidelight-demo"]
    assert figures["speculation"] == "prompt_lookup"
    assert figures["requests"] == 2
    assert figures["accepted_tokens"] >= timings["draft_n_accepted"]
    assert figures["tokens_per_step"] > 1.0
    assert 0 < figures["accepted_share"] < 1


def test_the_setting_turns_prompt_lookup_off(tmp_path: Path, tiny_model: Path) -> None:
    with running_server(tmp_path / "home", tiny_model, env={"SIDELIGHT_PROMPT_LOOKUP": "0"}) as off:
        answer = _chat(off, [*HELLO, {"role": "assistant", "content": "Hello!"}, *HELLO])
        assert "speculation" not in answer["timings"]
        figures = off.health().json()["speculation"]["sidelight-demo"]
        assert figures["speculation"] == "off"
        assert figures["accepted_tokens"] == 0 and figures["tokens_per_step"] == 1.0


@pytest.mark.parametrize(("cost", "expected"), [(3.0, "off"), (1.2, "prompt_lookup")])
def test_auto_follows_the_self_tunes_measured_cost(
    tmp_path: Path, tiny_model: Path, cost: float, expected: str
) -> None:
    """``SIDELIGHT_PROMPT_LOOKUP=auto`` with this machine's self-tune cached: a step with
    guesses measured at 3.0 plain steps (as on an AVX2 CPU without VNNI) loads without
    lookup, at 1.2 with it. The cache stands in for the measurement, so no tune runs."""
    home = tmp_path / "home"
    cache_dir = load_settings({"SIDELIGHT_HOME": str(home)}).paths.cache_dir
    cache_dir.mkdir(parents=True)
    key = cpu_tune.machine_key()
    entry = {"schema": cpu_tune.SCHEMA, "key": key, "properties": {}, "figures": []}
    (cache_dir / cpu_tune.CACHE_FILE).write_text(
        json.dumps({key: {**entry, "tuned_at": 0, "lookup_cost": cost}})
    )
    env = {"SIDELIGHT_PROMPT_LOOKUP": "auto", "SIDELIGHT_CPU_SELF_TUNE": "true"}
    with running_server(home, tiny_model, env=env) as server:
        answer = _chat(server, HELLO, max_tokens=8)
        assert answer["timings"].get("speculation") == (None if expected == "off" else expected)
        assert server.health().json()["speculation"]["sidelight-demo"]["speculation"] == expected
        assert "CPU self-tune on " not in server.output()  # the cached choice was used
