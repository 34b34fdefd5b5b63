"""End to end: the context a model is served with fits the KV-cache budget, and says so.

``sidelight serve`` runs the tiny code model (``tests/fixtures/tiny-coder``: 2,048 positions,
one layer of two 16-wide KV heads, so 96 bytes of u8 KV cache per token on the CPU) with a
``kv_cache_gb`` budget that holds 1,024 tokens. Every listing must report 1,024 -- the
context agents compact their history by -- and a prompt past it is a 400, not a slow
overflow. Real inference; nothing mocked.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from engine.context_fit import GIB
from tests.conftest import TINY_CODER
from tests.server.harness import ServerProcess, running_server

pytestmark = pytest.mark.slow

SERVED = 1024
PER_TOKEN = 2 * 1 * 2 * (16 + 8)  # K and V, 1 layer, 2 KV heads, u8 values + scale/zero point


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("fit-home")
    budget = str(SERVED * PER_TOKEN / GIB)
    with running_server(home, TINY_CODER, env={"SIDELIGHT_KV_CACHE_GB": budget}) as proc:
        yield proc


def test_v1_models_reports_the_served_context(server: ServerProcess, model_id: str) -> None:
    card = httpx.get(f"{server.base_url}/v1/models/{model_id}", timeout=30).json()
    assert card["context_length"] == SERVED
    assert card["max_model_len"] == SERVED


def test_ollama_show_reports_num_ctx_and_context_length(
    server: ServerProcess, model_id: str
) -> None:
    body = httpx.post(f"{server.base_url}/api/show", json={"model": model_id}, timeout=30).json()
    assert body["model_info"]["qwen2.context_length"] == SERVED
    lines = dict(line.split(None, 1) for line in body["parameters"].splitlines())
    assert lines["num_ctx"] == str(SERVED)


def test_lm_studio_reports_the_loaded_context(server: ServerProcess, model_id: str) -> None:
    models = httpx.get(f"{server.base_url}/api/v0/models", timeout=30).json()["data"]
    entry = next(m for m in models if m["id"] == model_id)
    assert entry["loaded_context_length"] == SERVED


def test_a_prompt_past_the_served_context_is_refused(client: openai.OpenAI, model_id: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=model_id, prompt="def f(x):\n" * 300, max_tokens=2)
    assert str(SERVED) in str(caught.value)


def _generate(server: ServerProcess, model_id: str, prompt: str, **options: int) -> httpx.Response:
    body = {
        "model": model_id,
        "prompt": prompt,
        "raw": True,
        "stream": False,
        "options": {"num_predict": 2, **options},
    }
    return httpx.post(f"{server.base_url}/api/generate", json=body, timeout=120)


def test_ollama_num_ctx_lowers_the_context_for_that_request(
    server: ServerProcess, model_id: str
) -> None:
    """Ollama would cut the prompt to num_ctx silently; Sidelight refuses, naming both."""
    prompt = "def f(x):\n" * 30
    fits = _generate(server, model_id, prompt)
    assert fits.status_code == 200, fits.text
    count = fits.json()["prompt_eval_count"]
    refused = _generate(server, model_id, prompt, num_ctx=count - 1)
    assert refused.status_code == 400, refused.text
    assert str(count - 1) in refused.json()["error"] and str(count) in refused.json()["error"]
    room = _generate(server, model_id, prompt, num_ctx=count + 1)
    assert room.status_code == 200, room.text
    assert room.json()["eval_count"] == 1  # num_predict 2 clipped to the one token num_ctx leaves


def test_ollama_num_ctx_below_one_is_a_400_naming_it(server: ServerProcess, model_id: str) -> None:
    reply = _generate(server, model_id, "hello", num_ctx=0)
    assert reply.status_code == 400
    assert "num_ctx" in reply.json()["error"]
