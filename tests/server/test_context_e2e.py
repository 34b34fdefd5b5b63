"""End to end: a long-context GGUF counts and feeds the whole prompt, on every text path.

The server runs the tiny code model's GGUF (``tests/fixtures/tiny-coder-f16.gguf``) with its
``qwen2.context_length`` raised to 32,768 (the model uses rotary positions, so it runs at any
length). GenAI's GGUF tokenizer cuts every encoding at 8,192 tokens; before the fix a
20,000-token prompt answered 200 with ``prompt_tokens: 8192``. The expected counts come from
the same model's IR tokenizer (``tests/fixtures/tiny-coder``), which does not truncate. Real
inference throughout; nothing is mocked. The embedding model (``tests/fixtures/tiny-embed``,
128 positions) used to embed a 602-token text with no complaint and report 602 tokens.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import TINY_CODER, TINY_CODER_GGUF
from tests.engine import gguf_builder as gb
from tests.server.harness import ServerProcess, running_server, store_embedding_model

pytestmark = pytest.mark.slow

CONTEXT = 32768
LONG_TEXT = "\n".join(f"line {i}: the quick brown fox jumps over the lazy dog" for i in range(400))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("long-gguf")
    parts = gb.load(TINY_CODER_GGUF).set("qwen2.context_length", gb.U32, gb.u32(CONTEXT))
    model = parts.write(Path(folder) / "tiny-coder-32k.gguf")
    store_embedding_model(folder / "home")
    with running_server(folder / "home", model) as proc:
        yield proc


def _ir_count(text: str, chat: bool) -> int:
    import openvino_genai as ov_genai

    tokenizer = ov_genai.Tokenizer(str(TINY_CODER))
    if chat:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True
        )
    return len(tokenizer.encode(text, add_special_tokens=not chat).input_ids.data[0])


def test_chat_counts_the_whole_prompt(client: openai.OpenAI, model_id: str) -> None:
    expected = _ir_count(LONG_TEXT, chat=True)
    assert 8192 < expected < CONTEXT
    reply = client.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": LONG_TEXT}], max_tokens=2
    )
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == expected


def test_completions_count_the_whole_prompt(client: openai.OpenAI, model_id: str) -> None:
    reply = client.completions.create(model=model_id, prompt=LONG_TEXT, max_tokens=2)
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == _ir_count(LONG_TEXT, chat=False)


def test_ollama_generate_counts_the_whole_prompt(server: ServerProcess, model_id: str) -> None:
    body = {
        "model": model_id,
        "prompt": LONG_TEXT,
        "raw": True,
        "stream": False,
        "options": {"num_predict": 2},
    }
    reply = httpx.post(f"{server.base_url}/api/generate", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    assert reply.json()["prompt_eval_count"] == _ir_count(LONG_TEXT, chat=False)


# Minified JSON as agents send it (Qwen-style templates write each tool schema on one line):
# no line break anywhere, far past the tokenizer's 8,192-token cut.
ONE_LINE = json.dumps(
    [{"path": f"src/module_{i}/file_{i}.py", "lines": i, "ok": i % 2 == 0} for i in range(300)],
    separators=(",", ":"),
)


def test_a_prompt_without_line_breaks_is_counted_whole(
    client: openai.OpenAI, model_id: str
) -> None:
    """Refused before (split only at line breaks); now encoded whole, in pieces."""
    expected = _ir_count(ONE_LINE, chat=False)
    assert "\n" not in ONE_LINE and 8192 < expected < CONTEXT
    reply = client.completions.create(model=model_id, prompt=ONE_LINE, max_tokens=2)
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == expected


def test_a_chat_without_line_breaks_in_its_message_is_counted_whole(
    client: openai.OpenAI, model_id: str
) -> None:
    expected = _ir_count(ONE_LINE, chat=True)
    reply = client.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": ONE_LINE}], max_tokens=2
    )
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == expected


EMBED_TOO_LONG = "hello world " * 300  # 602 tokens for tiny-embed, which reads 128


def test_v1_embeddings_refuse_a_text_longer_than_the_model_reads(server: ServerProcess) -> None:
    body = {"model": "tiny-embed", "input": ["short", EMBED_TOO_LONG]}
    reply = httpx.post(f"{server.base_url}/v1/embeddings", json=body, timeout=120)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == "input.1"
    assert "602" in error["message"] and "128" in error["message"]


def test_ollama_embed_refuses_a_text_longer_than_the_model_reads(server: ServerProcess) -> None:
    body = {"model": "tiny-embed", "input": [EMBED_TOO_LONG], "truncate": False}
    reply = httpx.post(f"{server.base_url}/api/embed", json=body, timeout=120)
    assert reply.status_code == 400, reply.text
    assert "602" in reply.json()["error"] and "128" in reply.json()["error"]


def test_ollama_embed_truncates_by_default_and_counts_what_it_embedded(
    server: ServerProcess,
) -> None:
    """Ollama's ``truncate`` (true by default) cuts the text; the count says how far."""
    url = f"{server.base_url}/api/embed"
    cut = httpx.post(url, json={"model": "tiny-embed", "input": [EMBED_TOO_LONG]}, timeout=120)
    assert cut.status_code == 200, cut.text
    assert cut.json()["prompt_eval_count"] == 128
    # the vector is the one of the text's first 126 words ([CLS] + 126 + [SEP] = 128 tokens)
    head = " ".join(EMBED_TOO_LONG.split()[:126])
    same = httpx.post(url, json={"model": "tiny-embed", "input": [head]}, timeout=120).json()
    assert same["prompt_eval_count"] == 128
    assert cut.json()["embeddings"][0] == pytest.approx(same["embeddings"][0], abs=1e-5)


def test_embeddings_within_the_limit_still_count_every_token(server: ServerProcess) -> None:
    body = {"model": "tiny-embed", "input": ["hello world " * 20]}
    reply = httpx.post(f"{server.base_url}/v1/embeddings", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["prompt_tokens"] == 42
