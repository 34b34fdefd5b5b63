"""Speculative decoding through HTTP: the response ``timings`` and ``/health`` show it.

A real ``sidelight serve`` on the tiny demo model with prompt lookup on (the product's
default; the test harness turns it off for stream-shape tests), and one with the setting off.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

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
    answer = _chat(server, [{"role": "user", "content": reply}], max_tokens=40)  # quoted back
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
