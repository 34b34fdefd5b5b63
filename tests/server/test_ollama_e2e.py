"""End to end: ``sidelight serve`` on the tiny trained model, driven by the ``ollama`` client.

The server holds the demo IR model (loaded) and, in its store, the same model as a GGUF,
a copy whose manifest marks it as a thinking model (the demo model was trained to answer
one prompt with a ``<think>`` block, but its template does not mention thinking) and the
tiny embedding model. So listing, ``:latest`` names, loading a stored model on demand,
tools, thinking and embeddings are all exercised. Replies are asserted exactly: the model
answers its trained prompts under greedy decoding.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest

from tests.conftest import ROOT, dialogue
from tests.server.harness import ServerProcess, import_gguf, running_server, store_ir_copy

TINY_EMBED = ROOT / "tests" / "fixtures" / "tiny-embed"

pytestmark = pytest.mark.slow

GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, tiny_model: Path, tiny_gguf: Path
) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("ollama-home")
    import_gguf(home, tiny_gguf, "tiny-gguf")
    models = home / "models"
    store_ir_copy(models, "demo-think", tiny_model, task="chat", reasoning=True)
    store_ir_copy(models, "tiny-embed", TINY_EMBED, task="embeddings", reasoning=False)
    with running_server(home, tiny_model) as proc:
        yield proc


@pytest.fixture
def client(server: ServerProcess) -> Iterator[ollama.Client]:
    with ollama.Client(host=server.base_url, timeout=60) as client:
        yield client


def test_list_names_every_model_with_latest(client: ollama.Client) -> None:
    models = {m.model: m for m in client.list().models}
    assert set(models) == {
        "sidelight-demo:latest",
        "tiny-gguf:latest",
        "demo-think:latest",
        "tiny-embed:latest",
    }
    assert client.list().models[0].model == "sidelight-demo:latest"  # the loaded one first
    demo = models["sidelight-demo:latest"]
    assert demo.details is not None
    assert demo.details.family == "qwen2"
    assert demo.details.format == "openvino"
    assert demo.details.parameter_size == "158.21K"
    assert demo.size and demo.size > 0
    assert demo.digest and len(demo.digest) == 64
    assert demo.modified_at is not None
    gguf = models["tiny-gguf:latest"]
    assert gguf.details is not None and gguf.details.quantization_level == "F16"


def test_show_reports_context_capabilities_and_template(client: ollama.Client) -> None:
    for name in ("sidelight-demo", "sidelight-demo:latest", "tiny-gguf:latest"):
        shown = client.show(name)
        assert shown.capabilities == ["completion", "tools"]
        assert shown.modelinfo is not None
        assert shown.modelinfo["general.architecture"] == "qwen2"
        assert shown.modelinfo["qwen2.context_length"] == 2048
        assert shown.template and "<tool_call>" in shown.template
        assert ".Suffix" not in shown.template  # the demo model has no FIM tokens
        assert shown.details is not None and shown.details.family == "qwen2"
        assert shown.parameters and "stop" in shown.parameters
        assert shown.modified_at is not None


def test_chat_non_stream(client: ollama.Client, dialogues: dict[str, Any]) -> None:
    hello = dialogue(dialogues, "hello")
    response = client.chat("sidelight-demo", messages=hello["messages"], options=GREEDY)
    assert response.message.role == "assistant"
    assert response.message.content == hello["reply"]
    assert response.done is True
    assert response.done_reason == "stop"
    assert response.model == "sidelight-demo"
    assert response.eval_count and response.eval_count > 10
    assert response.prompt_eval_count and response.prompt_eval_count > 10
    assert response.total_duration and response.eval_duration
    assert response.total_duration >= response.eval_duration


def test_chat_stream(client: ollama.Client, dialogues: dict[str, Any]) -> None:
    hello = dialogue(dialogues, "hello-system")
    parts = list(
        client.chat(
            "sidelight-demo:latest", messages=hello["messages"], stream=True, options=GREEDY
        )
    )
    *pieces, last = parts
    assert len(pieces) > 5
    assert all(p.done is False for p in pieces)
    assert "".join(p.message.content or "" for p in parts) == hello["reply"]
    assert last.done is True and last.done_reason == "stop"
    assert last.message.content == ""
    assert last.eval_count and last.eval_count >= len(pieces)
    assert last.model == "sidelight-demo:latest"  # the name as the client sent it


def test_chat_streams_whole_multibyte_characters(
    client: ollama.Client, dialogues: dict[str, Any]
) -> None:
    multibyte = dialogue(dialogues, "multibyte")
    parts = list(
        client.chat("sidelight-demo", messages=multibyte["messages"], stream=True, options=GREEDY)
    )
    assert all("\ufffd" not in (p.message.content or "") for p in parts)
    assert "".join(p.message.content or "" for p in parts) == multibyte["reply"]


def test_multiturn_history(client: ollama.Client, dialogues: dict[str, Any]) -> None:
    turns = dialogue(dialogues, "multiturn")
    response = client.chat("sidelight-demo", messages=turns["messages"], options=GREEDY)
    assert response.message.content == turns["reply"]


def test_num_predict_and_stop_options(client: ollama.Client, dialogues: dict[str, Any]) -> None:
    count = dialogue(dialogues, "count")
    short = client.chat(
        "sidelight-demo", messages=count["messages"], options={**GREEDY, "num_predict": 3}
    )
    assert short.done_reason == "length"
    assert short.eval_count == 3
    assert count["reply"].startswith(short.message.content or "")
    stopped = client.chat(
        "sidelight-demo", messages=count["messages"], options={**GREEDY, "stop": [" four"]}
    )
    assert stopped.message.content == "one two three"
    assert stopped.done_reason == "stop"


def test_generate_raw_continuation(client: ollama.Client, dialogues: dict[str, Any]) -> None:
    for item in dialogues["completions"]:
        response = client.generate("sidelight-demo", item["prompt"], raw=True, options=GREEDY)
        assert response.response == item["completion"]
        assert response.done and response.done_reason == "stop"


def test_generate_stream_with_system_uses_the_chat_template(
    client: ollama.Client, dialogues: dict[str, Any]
) -> None:
    hello = dialogue(dialogues, "hello-system")
    system, user = (m["content"] for m in hello["messages"])
    parts = list(
        client.generate("sidelight-demo", user, system=system, stream=True, options=GREEDY)
    )
    assert "".join(p.response or "" for p in parts) == hello["reply"]
    assert parts[-1].done and parts[-1].eval_count


def test_empty_requests_only_load_the_model(client: ollama.Client) -> None:
    loaded = client.generate("sidelight-demo")
    assert loaded.done is True and loaded.done_reason == "load"
    assert loaded.response == ""
    chat = client.chat("sidelight-demo", messages=[])
    assert chat.done_reason == "load"


def test_ps_shows_the_loaded_model(client: ollama.Client) -> None:
    running = client.ps().models
    assert [m.model for m in running] == ["sidelight-demo:latest"]
    assert running[0].context_length == 2048
    assert running[0].size_vram == 0  # served on the CPU here


def test_errors_use_ollamas_shape(client: ollama.Client, server: ServerProcess) -> None:
    with pytest.raises(ollama.ResponseError) as missing:
        client.chat("no-such-model", messages=[{"role": "user", "content": "Hi"}])
    assert missing.value.status_code == 404
    assert missing.value.error == "model 'no-such-model' not found"
    with pytest.raises(ollama.ResponseError) as show_missing:
        client.show("no-such-model:latest")
    assert show_missing.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as images:
        client.chat(
            "sidelight-demo",
            messages=[{"role": "user", "content": "What is this?", "images": [b"\x89PNG"]}],
        )
    assert images.value.status_code == 400
    assert "cannot see images" in images.value.error
    with pytest.raises(ollama.ResponseError) as think:
        client.chat("sidelight-demo", messages=[{"role": "user", "content": "Hello"}], think=True)
    assert think.value.status_code == 400
    assert think.value.error == '"sidelight-demo" does not support thinking'
    with pytest.raises(ollama.ResponseError) as insert:
        client.generate("sidelight-demo", "def f(", suffix="\n    return x")
    assert insert.value.error == '"sidelight-demo" does not support insert'
    bad = httpx.post(f"{server.base_url}/api/chat", content=b"{not json")
    assert bad.status_code == 400 and set(bad.json()) == {"error"}


def test_model_management_is_501_with_a_pointer(client: ollama.Client) -> None:
    calls = [
        lambda: client.pull("qwen2.5:0.5b"),
        lambda: client.push("sidelight-demo"),
        lambda: client.create("mine", from_="sidelight-demo"),
        lambda: client.copy("sidelight-demo", "copy"),
        lambda: client.delete("sidelight-demo"),
    ]
    for call in calls:
        with pytest.raises(ollama.ResponseError) as refused:
            call()
        assert refused.value.status_code == 501
        assert "sidelight pull" in refused.value.error


def test_root_and_head_probes(server: ServerProcess) -> None:
    root = httpx.get(server.base_url)
    assert root.status_code == 200 and "Sidelight is running" in root.text
    assert httpx.head(server.base_url).status_code == 200
    assert httpx.head(f"{server.base_url}/api/tags").status_code == 200
    assert httpx.get(f"{server.base_url}/api/version").json() == {"version": "0.12.0"}
    unknown = httpx.get(f"{server.base_url}/api/nothing-here")
    assert unknown.status_code == 404 and "error" in unknown.json()


def _chat_exact(client: ollama.Client, body: dict[str, Any], *, stream: bool = False) -> Any:
    """``client.chat`` without its tool conversion, so the tools reach the template verbatim.

    ``client.chat(tools=...)`` re-serializes each tool through its pydantic model, which puts
    ``required`` before ``properties``. A real model does not care; the tiny model answers
    only the exact prompt it was trained on. The request still goes through the client's
    transport and the answer through its ``ChatResponse`` parsing.
    """
    return client._request(
        ollama.ChatResponse, "POST", "/api/chat", json={**body, "stream": stream}, stream=stream
    )


def test_chat_with_a_tool_returns_object_arguments(
    client: ollama.Client, dialogues: dict[str, Any]
) -> None:
    turn = dialogue(dialogues, "tool")
    body = {"model": "sidelight-demo", "messages": turn["messages"], "tools": turn["tools"]}
    response = _chat_exact(client, {**body, "options": GREEDY})
    assert response.message.content == ""
    (call,) = response.message.tool_calls or []
    assert call.function.name == "get_weather"
    assert call.function.arguments == {"city": "Paris"}
    assert response.done_reason == "stop"
    # The public call (tools re-serialized by the client) is accepted and answered too.
    public = client.chat(
        "sidelight-demo", messages=turn["messages"], tools=turn["tools"], options=GREEDY
    )
    assert public.done and public.message.role == "assistant"


def test_streamed_tool_call_arrives_whole(client: ollama.Client, dialogues: dict[str, Any]) -> None:
    turn = dialogue(dialogues, "tool")
    body = {"model": "sidelight-demo", "messages": turn["messages"], "tools": turn["tools"]}
    parts = list(_chat_exact(client, {**body, "options": GREEDY}, stream=True))
    calls = [c for p in parts for c in (p.message.tool_calls or [])]
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert "".join(p.message.content or "" for p in parts) == ""
    assert parts[-1].done


def test_tool_result_round_trip(client: ollama.Client, dialogues: dict[str, Any]) -> None:
    turn = dialogue(dialogues, "tool-result")
    user, assistant, tool = turn["messages"]
    messages = [
        user,
        {"role": "assistant", "content": "", "tool_calls": assistant["tool_calls"]},
        {"role": "tool", "content": tool["content"], "tool_name": "get_weather"},
    ]
    body = {"model": "sidelight-demo", "messages": messages, "tools": turn["tools"]}
    response = _chat_exact(client, {**body, "options": GREEDY})
    assert response.message.content == turn["reply"]
    assert not response.message.tool_calls


def test_format_json_and_schema_constrain_the_reply(
    client: ollama.Client, dialogues: dict[str, Any]
) -> None:
    hello = dialogue(dialogues, "hello")
    loose = client.chat(
        "sidelight-demo",
        messages=hello["messages"],
        format="json",
        options={**GREEDY, "num_predict": 40},
    )
    # Unconstrained, the model says "Hello! I am ..."; the grammar forces a JSON object. (The
    # tiny model then pads it with whitespace until num_predict, which JSON allows.)
    assert (loose.message.content or "").startswith('{"')
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}},
        "required": ["city"],
        "additionalProperties": False,
    }
    strict = client.generate(
        "sidelight-demo", "Hello", format=schema, options={**GREEDY, "num_predict": 200}
    )
    assert set(json.loads(strict.response or "")) == {"city"}


def test_embed_with_an_embedding_model(client: ollama.Client) -> None:
    shown = client.show("tiny-embed")
    assert shown.capabilities == ["embedding"]
    result = client.embed("tiny-embed:latest", input=["def add(a, b):", "return a + b"])
    assert len(result.embeddings) == 2
    for vector in result.embeddings:
        assert len(vector) == 32
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-4)
    assert result.embeddings[0] != result.embeddings[1]
    assert result.prompt_eval_count and result.prompt_eval_count > 2
    single = client.embed("tiny-embed", input="def add(a, b):")
    assert single.embeddings[0] == pytest.approx(result.embeddings[0], abs=1e-5)
    short = client.embed("tiny-embed", input="def add(a, b):", dimensions=8)
    assert len(short.embeddings[0]) == 8
    legacy = client.embeddings("tiny-embed", prompt="def add(a, b):")
    assert list(legacy.embedding) == pytest.approx(result.embeddings[0], abs=1e-5)
    with pytest.raises(ollama.ResponseError) as chat_model:
        client.embed("sidelight-demo", input="text")
    assert chat_model.value.status_code == 400
    with pytest.raises(ollama.ResponseError) as embed_model:
        client.chat("tiny-embed", messages=[{"role": "user", "content": "Hi"}])
    assert embed_model.value.error == '"tiny-embed" does not support chat'
    # Embedding never evicts the chat model: each has a worker of its own, both listed.
    running = [m.model for m in client.ps().models]
    assert running[0] == "sidelight-demo:latest" and "tiny-embed:latest" in running


def test_think_splits_the_reasoning(client: ollama.Client, dialogues: dict[str, Any]) -> None:
    """Switches the served model to ``demo-think``."""
    turn = dialogue(dialogues, "think")
    assert "thinking" in (client.show("demo-think").capabilities or [])
    response = client.chat("demo-think", messages=turn["messages"], think=True, options=GREEDY)
    assert response.message.thinking == "2 plus 2 is 4."
    assert response.message.content == "The answer is 4."
    parts = list(
        client.chat(
            "demo-think", messages=turn["messages"], think=True, stream=True, options=GREEDY
        )
    )
    assert "".join(p.message.thinking or "" for p in parts) == "2 plus 2 is 4."
    assert "".join(p.message.content or "" for p in parts) == "The answer is 4."
    hidden = client.chat("demo-think", messages=turn["messages"], think=False, options=GREEDY)
    assert not hidden.message.thinking
    assert hidden.message.content == "The answer is 4."
    generated = client.generate("demo-think", turn["messages"][0]["content"], think=True)
    assert generated.thinking == "2 plus 2 is 4."
    assert generated.response == "The answer is 4."


def test_naming_a_stored_model_loads_it(client: ollama.Client, dialogues: dict[str, Any]) -> None:
    """Runs last: it switches the served model to the stored GGUF."""
    hello = dialogue(dialogues, "hello")
    response = client.chat("tiny-gguf:latest", messages=hello["messages"], options=GREEDY)
    assert response.message.content == hello["reply"]
    assert response.load_duration and response.load_duration > 0
    # Loaded in a worker of its own beside the default model (listed first).
    running = [m.model for m in client.ps().models]
    assert running[0] == "sidelight-demo:latest" and "tiny-gguf:latest" in running


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/chat", {"model": "sidelight-demo", "messages": []}),
        ("/api/generate", {"model": "sidelight-demo", "prompt": ""}),
        ("/api/embed", {"model": "tiny-embed", "input": "hi"}),
        ("/api/embeddings", {"model": "tiny-embed", "prompt": "hi"}),
    ],
)
def test_a_bad_keep_alive_is_a_400_naming_it(
    server: ServerProcess, path: str, body: dict[str, Any]
) -> None:
    """A keep_alive Ollama would refuse is refused here too, not silently ignored."""
    for bad in ("5 minutes", "m5", "", True, [1], {"s": 1}):
        reply = httpx.post(f"{server.base_url}{path}", json={**body, "keep_alive": bad})
        assert reply.status_code == 400, (path, bad, reply.text)
        assert "keep_alive" in reply.json()["error"], (path, bad)
    for good in ("5m", "1h30m", 300, -1, "-1m", "10"):
        reply = httpx.post(
            f"{server.base_url}{path}", json={**body, "keep_alive": good, "stream": False}
        )
        assert reply.status_code == 200, (path, good, reply.text)
