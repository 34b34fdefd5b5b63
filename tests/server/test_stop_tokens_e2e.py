"""End to end: every end token a model declares stops the reply and stays out of it.

GenAI stops on the end ids it reads itself (an IR folder's ``generation_config.json``, a
GGUF file's one ``eos_token_id``); a model declaring more (Llama 3's three ids, gpt-oss's
``<|call|>``, GLM's ``<|user|>``) in ``config.json`` or in a GGUF's ``eot_token_id`` ran
past them, or showed their text. Each server here runs a copy of the demo model that
declares one more end token, the ``.`` its trained "Hello" reply first emits, in one of
those places. Every dialect must then end the reply right there (finish reason ``stop``),
count the token, and leave its text out of the content.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.conftest import dialogue
from tests.engine import gguf_builder as gb
from tests.server.harness import ServerProcess, running_server

pytestmark = pytest.mark.slow

STOP_TEXT = "."  # the declared end token's text: the reply's first full stop


def _stop_id(tiny_model: Path) -> int:
    import openvino_genai as ov_genai

    tokenizer = ov_genai.Tokenizer(str(tiny_model))
    ids = tokenizer.encode(STOP_TEXT, add_special_tokens=False).input_ids.data[0]
    assert len(ids) == 1
    return int(ids[0])


def _ir_copy(tiny_model: Path, folder: Path, file: str, stop: int) -> Path:
    model = folder / "demo-ends"
    shutil.copytree(tiny_model, model)
    if file == "config.json":  # GenAI's own file names the eos alone: config.json adds one
        _edit(model / "generation_config.json", eos_token_id=926)
    eos = json.loads((model / file).read_text())["eos_token_id"]
    _edit(model / file, eos_token_id=[*(eos if isinstance(eos, list) else [eos]), stop])
    return model


def _edit(file: Path, **fields: Any) -> None:
    file.write_text(json.dumps({**json.loads(file.read_text()), **fields}, indent=2))


@pytest.fixture(
    scope="module", params=["generation_config.json", "config.json", "gguf eot_token_id"]
)
def server(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    tiny_model: Path,
    tiny_gguf: Path,
) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("ends")
    stop = _stop_id(tiny_model)
    where = str(request.param)
    if where.startswith("gguf"):
        parts = gb.load(tiny_gguf).set("tokenizer.ggml.eot_token_id", gb.U32, gb.u32(stop))
        model = parts.write(folder / "demo-ends.gguf")
    else:
        model = _ir_copy(tiny_model, folder, where, stop)
    with running_server(folder / "home", model) as proc:
        yield proc


@pytest.fixture(scope="module")
def expected(dialogues: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """The "Hello" messages and the reply up to (not with) the declared end token."""
    hello = dialogue(dialogues, "hello")
    reply = str(hello["reply"])
    assert STOP_TEXT in reply
    return hello["messages"], reply[: reply.index(STOP_TEXT)]


def _reply_tokens(text: str, tiny_model: Path) -> int:
    """Tokens of ``text`` plus the end token itself (counted, never shown)."""
    import openvino_genai as ov_genai

    tokenizer = ov_genai.Tokenizer(str(tiny_model))
    return len(tokenizer.encode(text, add_special_tokens=False).input_ids.data[0]) + 1


def test_openai_chat_stops_at_the_declared_token_without_its_text(
    client: openai.OpenAI, model_id: str, expected: tuple[Any, str], tiny_model: Path
) -> None:
    messages, text = expected
    reply = client.chat.completions.create(model=model_id, messages=messages, temperature=0)
    assert reply.choices[0].message.content == text
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None
    assert reply.usage.completion_tokens == _reply_tokens(text, tiny_model)


def test_openai_chat_streamed(client: openai.OpenAI, model_id: str, expected: Any) -> None:
    messages, text = expected
    stream = client.chat.completions.create(
        model=model_id, messages=messages, temperature=0, stream=True
    )
    pieces, reasons = [], []
    for chunk in stream:
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            if choice.finish_reason:
                reasons.append(choice.finish_reason)
    assert "".join(pieces) == text and reasons == ["stop"]


def test_anthropic_messages(server: ServerProcess, model_id: str, expected: Any) -> None:
    messages, text = expected
    with anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0) as client:
        # The demo model decodes greedily by default (its generation_config).
        reply = client.messages.create(model=model_id, max_tokens=200, messages=messages)
    assert [block.type for block in reply.content] == ["text"]
    assert reply.content[0].text == text  # type: ignore[union-attr]
    assert reply.stop_reason == "end_turn"


def test_ollama_chat(server: ServerProcess, model_id: str, expected: Any) -> None:
    messages, text = expected
    body = {"model": model_id, "messages": messages, "stream": False, "options": {"temperature": 0}}
    response = httpx.post(f"{server.base_url}/api/chat", json=body, timeout=120)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["message"]["content"] == text and result["done_reason"] == "stop"


def test_responses(server: ServerProcess, model_id: str, expected: Any) -> None:
    messages, text = expected
    body = {"model": model_id, "input": messages, "temperature": 0, "store": False}
    response = httpx.post(f"{server.base_url}/v1/responses", json=body, timeout=120)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["status"] == "completed"
    (message,) = [item for item in result["output"] if item["type"] == "message"]
    assert [part["text"] for part in message["content"]] == [text]
