"""``sidelight serve`` as installed: the shipped defaults, not the test harness's settings.

Every other server test runs with prompt lookup off, the CPU self-tune off and one token per
stream delta (tests/server/harness.py). Here a real server on a fresh home keeps the
defaults (prompt lookup auto, self-tune on, the default stream interval) and serves the
built-in demo model; the official ``openai`` SDK must read from it exactly the text greedy
decoding without lookup gives: the trained replies, and a reply quoted back (where lookup
guesses right) compared with a second server that has lookup off. Prompt lookup ``auto`` is
on where the self-tune found its guesses cheap on this CPU and off where not (an AVX2 CPU
without VNNI): the tests read which from the self-tune's log line and hold the server to it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.conftest import dialogue
from tests.server.harness import ServerProcess, running_server

pytestmark = pytest.mark.slow

MODEL = "sidelight-demo"


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """No --model, no settings: what a person gets from ``sidelight serve``."""
    with running_server(tmp_path_factory.mktemp("home"), None, shipped_defaults=True) as proc:
        yield proc


@pytest.fixture(scope="module")
def no_lookup(server: ServerProcess) -> ServerProcess:
    """The reference: plain greedy decoding, prompt lookup off (the harness's settings, so
    the package's shared server, tests/server/conftest.py)."""
    return server


def sdk(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="local", max_retries=0)


def chat(server: ServerProcess, messages: list[Any]) -> tuple[str, dict[str, Any]]:
    """The reply's text and timings, whole."""
    with sdk(server) as client:
        done = client.chat.completions.create(
            model=MODEL, messages=messages, temperature=0, max_tokens=200
        )
    timings: dict[str, Any] = (done.model_extra or {}).get("timings", {})
    assert done.choices[0].finish_reason == "stop"
    return done.choices[0].message.content or "", timings


def streamed(server: ServerProcess, messages: list[Any]) -> tuple[str, int]:
    """The reply's text joined from a stream, and how many deltas carried text."""
    with sdk(server) as client:
        stream = client.chat.completions.create(
            model=MODEL, messages=messages, temperature=0, max_tokens=200, stream=True
        )
        pieces = [c.choices[0].delta.content for c in stream if c.choices]
    texts = [p for p in pieces if p]
    return "".join(texts), len(texts)


def lookup_on(server: ServerProcess) -> bool:
    """What the self-tune decided for prompt lookup ``auto`` on this CPU (its log line)."""
    found = re.search(r"prompt lookup auto: (on|off)", server.output())
    assert found, server.output()
    return found.group(1) == "on"


def test_the_server_runs_the_shipped_defaults(shipped: ServerProcess) -> None:
    health = shipped.health().json()
    assert health["model"] == MODEL and health["status"] == "ready"
    assert isinstance(health["cpu_properties"], dict)  # the self-tune's choice was loaded
    assert "CPU self-tune on " in shipped.output()  # it tuned: a fresh home has no cache


@pytest.mark.parametrize("name", ["hello", "multibyte", "multiturn", "count"])
def test_trained_replies_whole_and_streamed(
    shipped: ServerProcess, dialogues: dict[str, Any], name: str
) -> None:
    case = dialogue(dialogues, name)
    text, timings = chat(shipped, case["messages"])
    assert text == case["reply"]
    assert timings.get("speculation") == ("prompt_lookup" if lookup_on(shipped) else None)
    assert streamed(shipped, case["messages"])[0] == case["reply"]


def test_a_reply_quoted_back_matches_greedy_without_lookup(
    shipped: ServerProcess, no_lookup: ServerProcess, dialogues: dict[str, Any]
) -> None:
    """Quoting the reply back is where lookup guesses (and is accepted): the text must not
    change, whole or streamed."""
    reply = dialogue(dialogues, "hello")["reply"]
    quoted = [{"role": "user", "content": reply}]
    reference, plain = chat(no_lookup, quoted)
    assert "speculation" not in plain  # the reference really ran without lookup
    text, timings = chat(shipped, quoted)
    assert text == reference
    if lookup_on(shipped):  # lookup's guesses were taken on this prompt
        assert timings["draft_n_accepted"] > 0
    else:  # auto turned it off on this CPU: plain decoding, as the reference
        assert "speculation" not in timings
    figures = shipped.health().json()["speculation"][MODEL]
    assert figures["speculation"] == ("prompt_lookup" if lookup_on(shipped) else "off")
    assert streamed(shipped, quoted)[0] == reference
