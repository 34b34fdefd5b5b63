"""End to end: fill-in-the-middle (an IDE's autocomplete) through ``sidelight serve``.

The server runs the tiny code model (``tests/fixtures/tiny-coder``), which has Qwen2.5-Coder's
FIM tokens and was trained on the code holes in ``tests/models/coder_dialogues.json``; its GGUF
form sits in the server's store. ``suffix`` on ``/v1/completions`` (the ``openai`` SDK) and on
``/api/generate`` (the ``ollama`` client) must return each trained middle exactly, streamed and
whole, from the IR and from the GGUF, and ``/api/show`` must offer ``insert`` with a template
that mentions ``.Suffix``. The refusals for a model without FIM tokens (the demo model) are in
``test_openai_tools_e2e.py`` and ``test_ollama_e2e.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ollama
import openai
import pytest

from engine.worker.prepare import FIM_TOKENS
from tests.conftest import TINY_CODER, TINY_CODER_GGUF
from tests.server.harness import ServerProcess, import_gguf, running_server

pytestmark = pytest.mark.slow

CODER = "tiny-coder"
CODER_GGUF = "tiny-coder-gguf"
HOLES: list[dict[str, str]] = json.loads(
    (Path(__file__).parents[1] / "models" / "coder_dialogues.json").read_text(encoding="utf-8")
)["fill_in_middle"]
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("fim-home")
    import_gguf(home, TINY_CODER_GGUF, CODER_GGUF)
    with running_server(home, TINY_CODER) as proc:
        yield proc


@pytest.fixture
def ollama_client(server: ServerProcess) -> Iterator[ollama.Client]:
    with ollama.Client(host=server.base_url, timeout=60) as client:
        yield client


def _fill(client: openai.OpenAI, model: str, hole: dict[str, str], **extra: Any) -> Any:
    return client.completions.create(
        model=model,
        prompt=hole["prefix"],
        suffix=hole["suffix"],
        max_tokens=32,
        temperature=0,
        **extra,
    )


@pytest.mark.parametrize("hole", HOLES, ids=[h["name"] for h in HOLES])
def test_openai_completion_fills_the_middle(
    client: openai.OpenAI, model_id: str, hole: dict[str, str]
) -> None:
    assert model_id == CODER
    response = _fill(client, CODER, hole)
    choice = response.choices[0]
    assert choice.text == hole["middle"]
    assert choice.finish_reason == "stop"
    assert response.usage is not None and response.usage.completion_tokens > 0


def test_openai_completion_streams_the_middle(client: openai.OpenAI) -> None:
    hole = HOLES[1]  # a middle of several tokens, with punctuation and braces
    chunks = [c for c in _fill(client, CODER, hole, stream=True) if c.choices]
    assert len(chunks) > 1
    assert "".join(c.choices[0].text for c in chunks) == hole["middle"]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_ollama_generate_fills_the_middle(ollama_client: ollama.Client) -> None:
    for hole in HOLES:
        response = ollama_client.generate(
            CODER, prompt=hole["prefix"], suffix=hole["suffix"], options=GREEDY
        )
        assert response.response == hole["middle"], hole["name"]
        assert response.done and response.done_reason == "stop"
    hole = HOLES[0]
    parts = list(
        ollama_client.generate(
            f"{CODER}:latest",
            prompt=hole["prefix"],
            suffix=hole["suffix"],
            stream=True,
            options=GREEDY,
        )
    )
    assert "".join(p.response or "" for p in parts) == hole["middle"]
    assert parts[-1].done and parts[-1].done_reason == "stop"


def test_show_offers_insert_with_a_suffix_template(ollama_client: ollama.Client) -> None:
    prefix, suffix, middle = FIM_TOKENS[0]
    # The loaded IR (its tokenizer asked) and the stored GGUF (its vocabulary read from the
    # file: llama.cpp's converter writes no fim_*_token_id keys for a Qwen2 tokenizer).
    for name in (CODER, f"{CODER_GGUF}:latest"):
        shown = ollama_client.show(name)
        assert shown.capabilities == ["completion", "tools", "insert"], name
        assert shown.template is not None
        fim = f"{{{{- if .Suffix }}}}{prefix}{{{{ .Prompt }}}}{suffix}{{{{ .Suffix }}}}{middle}"
        assert shown.template.startswith(fim), name
        assert "<tool_call>" in shown.template  # the chat template in the else branch


def test_gguf_fills_the_middle(client: openai.OpenAI) -> None:
    hole = HOLES[2]
    response = _fill(client, CODER_GGUF, hole)  # loads the GGUF from the store
    assert response.model == CODER_GGUF
    assert response.choices[0].text == hole["middle"]
    assert response.choices[0].finish_reason == "stop"
    back = _fill(client, CODER, HOLES[3])  # and back to the IR
    assert back.choices[0].text == HOLES[3]["middle"]
