"""The server lists the store's models and loads a stored model when a request names it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import dialogue
from tests.server.harness import ServerProcess, import_gguf, running_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, tiny_model: Path, tiny_gguf: Path
) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("store-home")
    import_gguf(home, tiny_gguf, "tiny-gguf")
    with running_server(home, tiny_model) as proc:
        yield proc


def test_models_lists_loaded_and_stored(server: ServerProcess) -> None:
    data = httpx.get(f"{server.base_url}/v1/models").json()["data"]
    by_id = {m["id"]: m for m in data}
    assert set(by_id) == {"sidelight-demo", "tiny-gguf"}
    assert by_id["sidelight-demo"]["status"] == "loaded"  # loaded, loading or unloaded
    assert by_id["tiny-gguf"]["status"] == "unloaded"
    assert by_id["tiny-gguf"]["format"] == "gguf"


def test_request_for_stored_model_loads_it(
    server: ServerProcess, dialogues: dict[str, Any]
) -> None:
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=3)
    hello = dialogue(dialogues, "hello")
    for model in ("tiny-gguf", "sidelight-demo"):
        response = client.chat.completions.create(
            model=model, messages=hello["messages"], temperature=0
        )
        assert response.model == model
        assert response.choices[0].message.content == hello["reply"]
        # Each model has a worker of its own: both stay loaded, the default one on top.
        loaded = {m["id"]: m["state"] for m in server.health().json()["models"]}
        assert loaded[model] == "ready"
    assert server.health().json()["model"] == "sidelight-demo"


@pytest.mark.parametrize("name", ["../x", "/etc", "a/../../b", "..", "tiny-gguf/../../etc"])
def test_path_like_ids_are_404_everywhere(server: ServerProcess, name: str) -> None:
    body = {"model": name, "messages": [{"role": "user", "content": "Hello"}]}
    chat = httpx.post(f"{server.base_url}/v1/chat/completions", json=body)
    assert chat.status_code == 404 and chat.json()["error"]["code"] == "model_not_found"
    card = httpx.get(f"{server.base_url}/v1/models/{name}")
    assert card.status_code == 404
    assert server.health().json()["status"] == "ready"
