"""IDE-plugin requests replayed verbatim against ``sidelight serve`` on the demo model.

The requests live in ``tests/fixtures/plugin_requests/*.json``, each file with a
``provenance`` field saying where its requests come from. Two kinds, and only these:

* **Captured from running code**: ``continue_cli_openai.json``, the chat-with-tools request
  (``stream: true``, ``stream_options.include_usage``, three tools) that
  ``@continuedev/cli@1.5.47`` sent to ``/v1/chat/completions``, recorded byte for byte by
  ``tests/plugin_capture/record_proxy.py``. The CLI bundles ``@continuedev/openai-adapters``,
  which Continue's IDE extensions also use for OpenAI-compatible providers. ``codex.json``,
  the two ``/v1/responses`` requests ``@openai/codex@0.171.0`` (``codex exec``) sent: with
  its own 40 kB prompt, and with the README's small-model config.
  ``claude_code.json``: every request ``@anthropic-ai/claude-code@2.1.332`` sent in two
  ``claude -p`` runs (its full agent request to ``/v1/messages?beta=true``, streamed and
  its non-streamed fallback, and a ``--bare`` one), recorded the same way.
* **Derived from the plugins' source** at pinned commits (the plugins cannot run here: Copilot
  needs VS Code, Zed is a GUI application, Continue's IDE core is not published to run
  alone): ``copilot_byok_ollama.json`` (``/api/version``, ``/api/tags``, ``/api/show``),
  ``zed_ollama.json`` (``/api/tags``, ``/api/show``, ``/api/chat`` NDJSON with and without
  tools, a tool round trip) and ``continue_ollama.json`` (``/api/show`` by ``name``,
  ``/api/chat`` with Continue's default options). The bodies are the exact strings that
  code serialises (field order, ``null`` fields, ``1.0``); the conversation texts are the
  demo model's trained dialogues, since the user supplies those.

Headers are sent as recorded, except the transport's own (``Host``, ``Content-Length``,
``Connection``), which httpx supplies. Each test then checks the answer the way that
plugin's code reads it (see each test's docstring for the code it mirrors).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, dialogue
from tests.server.harness import ServerProcess

pytestmark = pytest.mark.slow
# ``server`` is the package's shared one (tests/server/conftest.py): these tests only read.

MODEL = "sidelight-demo"
SEED = 7
FIXTURES = ROOT / "tests" / "fixtures" / "plugin_requests"
TRANSPORT_HEADERS = {"host", "content-length", "connection"}


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    return data


def request(fixture: dict[str, Any], index_or_name: int | str) -> dict[str, Any]:
    requests: list[dict[str, Any]] = fixture["requests"]
    if isinstance(index_or_name, int):
        return requests[index_or_name]
    return next(r for r in requests if r.get("name") == index_or_name)


def build(http: httpx.Client, recorded: dict[str, Any]) -> httpx.Request:
    headers = [(k, v) for k, v in recorded["headers"] if k.lower() not in TRANSPORT_HEADERS]
    body = recorded["body"]
    return http.build_request(
        recorded["method"],
        recorded["path"],
        headers=headers,
        content=None if body is None else body.encode("utf-8"),
    )


def seeded(recorded: dict[str, Any], seed: int = SEED) -> dict[str, Any]:
    """The request with ``options.seed`` added: the one change made to a recorded body.

    Zed samples at temperature 1.0 and the demo model's greedy path has p ~ 0.95 at that
    temperature, so an unseeded replay would miss the trained reply about one run in twenty.
    A fixed seed makes the sampled reply reproducible without touching anything else.
    """
    body = json.loads(recorded["body"])
    body.setdefault("options", {})["seed"] = seed
    return {**recorded, "body": json.dumps(body, separators=(",", ":"))}


def replay(http: httpx.Client, recorded: dict[str, Any]) -> httpx.Response:
    return http.send(build(http, recorded))


def replay_lines(http: httpx.Client, recorded: dict[str, Any]) -> list[dict[str, Any]]:
    """Send a streamed Ollama request; one JSON object per line, as Zed and Continue split it."""
    response = http.send(build(http, recorded), stream=True)
    try:
        assert response.status_code == 200, response.read()
        return [json.loads(line) for line in response.iter_lines() if line.strip()]
    finally:
        response.close()


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        yield client


def test_every_fixture_says_where_it_comes_from() -> None:
    files = sorted(FIXTURES.glob("*.json"))
    assert [f.name for f in files] == [
        "claude_code.json",
        "claude_code_tool_search.json",
        "claude_code_turns.json",
        "codex.json",
        "codex_turns.json",
        "continue_cli_openai.json",
        "continue_ollama.json",
        "copilot_byok_ollama.json",
        "zed_ollama.json",
    ]
    for path in files:
        provenance = json.loads(path.read_text(encoding="utf-8"))["provenance"]
        assert provenance["kind"] in ("captured", "derived from source"), path.name
        if provenance["kind"] == "captured":
            assert provenance["source"].startswith("captured from "), path.name
        else:
            assert provenance["repo"] and provenance["files"], path.name


# ---- GitHub Copilot Chat, BYOK Ollama provider (derived from source) -------------------


def copilot_version_supported(current: str, minimum: str = "0.6.4") -> bool:
    """``OllamaLMProvider._isVersionSupported`` (ollamaProvider.ts 163-186), ported."""
    if current == "0.0.0":
        return True

    def parts(text: str) -> list[int]:
        out = []
        for piece in text.split("."):
            digits = ""
            for char in piece:  # parseInt: leading digits, NaN (falsy, so 0) without any
                if not char.isdigit():
                    break
                digits += char
            out.append(int(digits) if digits else 0)
        return out

    cur, low = parts(current), parts(minimum)
    for i in range(max(len(cur), len(low))):
        c = cur[i] if i < len(cur) else 0
        m = low[i] if i < len(low) else 0
        if c != m:
            return c > m
    return True


def test_copilot_byok_ollama_provider(http: httpx.Client) -> None:
    """Copilot lists the model with its real context and offers it in agent mode."""
    fixture = load("copilot_byok_ollama.json")
    version = replay(http, request(fixture, 0))
    assert version.status_code == 200
    assert copilot_version_supported(version.json()["version"])

    tags = replay(http, request(fixture, 1))
    assert tags.status_code == 200
    model_ids = [m["model"] for m in tags.json()["models"]]
    shown_request = request(fixture, 2)
    assert model_ids == [json.loads(shown_request["body"])["model"]]

    shown = replay(http, shown_request)
    assert shown.status_code == 200
    info = shown.json()
    # _getOllamaModelInfo (ollamaProvider.ts 143-156)
    model_info = info["model_info"]
    context_window = model_info.get(f"{model_info['general.architecture']}.context_length", 32768)
    assert context_window == 2048  # the demo model's, not Copilot's 32768 fallback
    output_tokens = context_window // 2 if context_window < 4096 else 4096
    assert (output_tokens, context_window - output_tokens) == (1024, 1024)
    assert model_info.get("general.basename", model_ids[0]) == MODEL
    assert "tools" in info["capabilities"]  # toolCalling: agent mode lists the model
    assert "vision" not in info["capabilities"]


# ---- Zed, Ollama provider (derived from source) -----------------------------------------


def zed_listing_ok(listing: dict[str, Any]) -> bool:
    """``LocalModelListing`` / ``ModelDetails`` (ollama.rs): every field but families required."""
    details = listing["details"]
    return (
        all(isinstance(listing[k], str) for k in ("name", "modified_at", "digest"))
        and isinstance(listing["size"], int)
        and listing["size"] >= 0
        and all(
            isinstance(details[k], str)
            for k in ("format", "family", "parameter_size", "quantization_level")
        )
        and (details.get("families") is None or isinstance(details["families"], list))
    )


def zed_delta_ok(line: dict[str, Any]) -> bool:
    """``ChatResponseDelta`` with an assistant ``ChatMessage``: what serde requires of a line."""
    message = line["message"]
    calls = message.get("tool_calls")
    reason = line.get("done_reason")
    counts = [line.get(k) for k in ("prompt_eval_count", "eval_count")]
    return (
        isinstance(line["model"], str)
        and isinstance(line["created_at"], str)
        and isinstance(line["done"], bool)
        and (reason is None or isinstance(reason, str))
        and all(n is None or (isinstance(n, int) and n >= 0) for n in counts)
        and message["role"] == "assistant"
        and isinstance(message["content"], str)  # required, even beside a tool call
        and (message.get("thinking") is None or isinstance(message["thinking"], str))
        and (
            calls is None
            or all(
                # PR #42275 (Ollama >= 0.12.10 form): {id: Option<String>, function}
                isinstance(call["function"]["name"], str)
                and "arguments" in call["function"]
                and (call.get("id") is None or isinstance(call["id"], str))
                for call in calls
            )
        )
    )


def zed_events(lines: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """``map_to_language_model_completion_events`` (provider/ollama.rs), reduced to data."""
    events: list[tuple[str, Any]] = []
    used_tools = False
    for line in lines:
        message = line["message"]
        if message.get("thinking"):
            events.append(("thinking", message["thinking"]))
        calls = message.get("tool_calls")
        if calls:
            function = calls[0]["function"]
            events.append(("tool_use", (function["name"], function["arguments"])))
            used_tools = True
        elif message["content"]:
            events.append(("text", message["content"]))
        if line["done"]:
            events.append(("usage", (line.get("prompt_eval_count"), line.get("eval_count"))))
            events.append(("stop", "tool_use" if used_tools else "end_turn"))
    return events


def test_zed_lists_and_shows_the_model(http: httpx.Client) -> None:
    fixture = load("zed_ollama.json")
    tags = replay(http, request(fixture, 0))
    assert tags.status_code == 200
    listings = tags.json()["models"]
    assert all(zed_listing_ok(m) for m in listings)
    names = [m["name"] for m in listings if "-embed" not in m["name"]]
    show_request = request(fixture, 1)
    assert names == [json.loads(show_request["body"])["model"]]

    shown = replay(http, show_request)
    assert shown.status_code == 200
    capabilities = shown.json().get("capabilities", [])
    assert "tools" in capabilities
    assert "vision" not in capabilities
    assert "thinking" not in capabilities  # so Zed sends think: false, which must be fine
    # Newer Zed reads the context from model_info[<general.architecture>.context_length].
    model_info = shown.json()["model_info"]
    assert model_info[f"{model_info['general.architecture']}.context_length"] == 2048


def test_zed_chat_streams_ndjson(http: httpx.Client, dialogues: dict[str, Any]) -> None:
    """temperature 1.0 (Zed's default), seeded, gives the trained reply."""
    lines = replay_lines(http, seeded(request(load("zed_ollama.json"), "chat")))
    assert all(zed_delta_ok(line) for line in lines)
    assert [line["done"] for line in lines] == [False] * (len(lines) - 1) + [True]
    events = zed_events(lines)
    assert "".join(v for k, v in events if k == "text") == dialogue(dialogues, "hello")["reply"]
    usage = dict(events)["usage"]
    assert all(isinstance(n, int) and n > 0 for n in usage)
    assert events[-1] == ("stop", "end_turn")


def test_zed_chat_with_tools_streams_a_tool_call(http: httpx.Client) -> None:
    lines = replay_lines(http, seeded(request(load("zed_ollama.json"), "chat-with-tools")))
    assert all(zed_delta_ok(line) for line in lines)
    events = zed_events(lines)
    assert [v for k, v in events if k == "tool_use"] == [("get_weather", {"city": "Paris"})]
    assert [k for k, _ in events if k == "text"] == []
    assert events[-1] == ("stop", "tool_use")
    (call,) = [c for line in lines for c in line["message"].get("tool_calls", [])]
    assert call["id"].startswith("call_")  # newer Zed uses Ollama's id when there is one


def test_zed_tool_round_trip(http: httpx.Client, dialogues: dict[str, Any]) -> None:
    """History as Zed sends it: ``tool_calls`` on the assistant turn, ``tool_name`` results."""
    lines = replay_lines(http, seeded(request(load("zed_ollama.json"), "tool-result")))
    assert all(zed_delta_ok(line) for line in lines)
    events = zed_events(lines)
    text = "".join(v for k, v in events if k == "text")
    assert text == dialogue(dialogues, "tool-result")["reply"]
    assert events[-1] == ("stop", "end_turn")


# ---- Continue, IDE extension's Ollama provider (derived from source) ---------------------


def continue_model_info(body: dict[str, Any]) -> tuple[list[str], int | None, bool]:
    """``Ollama.ensureModelInfo`` (Ollama.ts 173-249): stop words, num_ctx, FIM support."""
    stops: list[str] = []
    num_ctx = None
    for line in (body.get("parameters") or "").split("\n"):
        parts = re.match(r'^(\S+)\s+((?:".*")|\S+)$', line)
        if not parts:
            continue
        key, value = parts.group(1), parts.group(2)
        if key == "num_ctx":
            num_ctx = int(value)
        elif key == "stop":
            stops.append(json.loads(value))
    return stops, num_ctx, ".Suffix" in (body.get("template") or "")


def continue_messages(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``convertChatMessage`` in ``Ollama._streamChat`` (Ollama.ts 539-617)."""
    out: list[dict[str, Any]] = []
    for res in lines:
        assert "error" not in res, res
        message = res["message"]
        assert message["role"] == "assistant"
        if message.get("thinking") and not message["content"] and not message.get("tool_calls"):
            out.append({"role": "thinking", "content": message["thinking"]})
            continue
        chat: dict[str, Any] = {"role": "assistant", "content": message["content"]}
        if message.get("tool_calls"):
            chat["toolCalls"] = [
                {
                    "name": c["function"]["name"],
                    "arguments": json.dumps(c["function"]["arguments"]),
                }
                for c in message["tool_calls"]
            ]
        out.append(chat)
    return out


def test_continue_ollama_show(http: httpx.Client) -> None:
    shown = replay(http, request(load("continue_ollama.json"), 0))
    assert shown.status_code == 200
    stops, num_ctx, fim = continue_model_info(shown.json())
    # The fixture's chat requests carry what Continue takes from this answer.
    assert stops == ["<|im_end|>"]
    # the context the model is served with, so Continue sizes its history to it (not 8192)
    assert num_ctx == 2048
    assert fim is False  # no FIM tokens: no autocomplete offer


def test_continue_ollama_chat_with_a_large_default_num_predict(
    http: httpx.Client, dialogues: dict[str, Any]
) -> None:
    """Continue sends ``num_predict: 4096`` (its DEFAULT_MAX_TOKENS) whatever the model.

    Ollama takes it as an upper bound; Sidelight used to refuse it on the demo model, whose
    whole context is 2048 tokens (context_length_exceeded), so Continue could not chat.
    """
    recorded = request(load("continue_ollama.json"), "chat")
    assert json.loads(recorded["body"])["options"]["num_predict"] == 4096
    lines = replay_lines(http, recorded)
    messages = continue_messages(lines)
    assert "".join(m["content"] for m in messages) == dialogue(dialogues, "hello")["reply"]
    assert lines[-1]["done"] is True and lines[-1]["done_reason"] == "stop"


def test_continue_ollama_chat_with_tools(http: httpx.Client) -> None:
    lines = replay_lines(http, request(load("continue_ollama.json"), "chat-with-tools"))
    calls = [c for m in continue_messages(lines) for c in m.get("toolCalls", [])]
    assert calls == [{"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}]


# ---- Continue CLI, OpenAI provider (captured from running code) ------------------------


def sse_chunks(response: httpx.Response) -> tuple[list[dict[str, Any]], bool]:
    """Server-sent events as the ``openai`` npm package's Stream reads them."""
    chunks: list[dict[str, Any]] = []
    done = False
    for line in response.iter_lines():
        if not line.startswith("data:"):
            assert line == "" or line.startswith(":"), line
            continue
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            done = True
            continue
        assert not done, "data after [DONE]"
        chunks.append(json.loads(data))
    return chunks, done


def test_continue_cli_chat_with_tools_and_usage(http: httpx.Client) -> None:
    """The captured request: stream with ``stream_options.include_usage`` and three tools.

    The demo model was never trained on Continue's system prompt, and the CLI sends no
    temperature, so the text is arbitrary; what is checked is everything Continue's stream
    handling reads: chunk shape, a finish reason, and the usage-only last chunk.
    """
    recorded = request(load("continue_cli_openai.json"), 0)
    body = json.loads(recorded["body"])
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert [t["function"]["name"] for t in body["tools"]] == ["Read", "List", "Exit"]

    response = http.send(build(http, recorded), stream=True)
    try:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        chunks, done = sse_chunks(response)
    finally:
        response.close()
    assert done
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == MODEL for c in chunks)
    with_choices = [c for c in chunks if c["choices"]]
    assert with_choices[0]["choices"][0]["delta"]["role"] == "assistant"
    reasons = [c["choices"][0]["finish_reason"] for c in with_choices]
    assert reasons[-1] in ("stop", "length", "tool_calls")
    assert all(r is None for r in reasons[:-1])
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    usage = usage_chunk["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens"] > 500  # the system prompt and tool schemas were templated
    assert all(c.get("usage") is None for c in chunks[:-1])


# ---- Codex CLI, Responses API (captured from running code) ------------------------------


def codex_events(response: httpx.Response) -> list[dict[str, Any]]:
    """Server-sent events as Codex's ``process_sse`` (codex-api/src/sse/responses.rs) reads
    them: ``event:`` and ``data:`` lines; each data is an object with a ``type``."""
    events: list[dict[str, Any]] = []
    name = None
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            event = json.loads(line[len("data: ") :])
            assert event["type"] == name, (name, event["type"])
            events.append(event)
        else:
            assert line == "", line
    return events


def test_codex_default_request_is_refused_as_over_the_context(http: httpx.Client) -> None:
    """Codex's own prompt, tools (a namespace, web_search) and fields are all accepted; only
    its size is refused, with the code Codex turns into its context-window message."""
    recorded = request(load("codex.json"), "default")
    body = json.loads(recorded["body"])
    assert {"type": "web_search", "external_web_access": False} in body["tools"]
    assert body["store"] is False and body["include"] == ["reasoning.encrypted_content"]
    response = replay(http, recorded)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded", error
    assert "2048" in error["message"]


def test_codex_small_model_request_streams_as_codex_reads_it(
    http: httpx.Client, dialogues: dict[str, Any]
) -> None:
    recorded = request(load("codex.json"), "slim")
    body = json.loads(recorded["body"])
    assert [i["role"] for i in body["input"]] == ["developer", "user"] and body["tools"] == []
    response = http.send(build(http, recorded), stream=True)
    try:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        events = codex_events(response)
    finally:
        response.close()
    assert events[0]["type"] == "response.created"
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == dialogue(dialogues, "hello-system")["reply"]
    (done,) = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done["type"] == "message" and done["role"] == "assistant"
    assert done["content"] == [
        {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    ]
    completed = events[-1]
    assert completed["type"] == "response.completed"
    usage = completed["response"]["usage"]
    assert completed["response"]["id"].startswith("resp_")
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert usage["input_tokens_details"]["cached_tokens"] == 0
    assert usage["output_tokens_details"]["reasoning_tokens"] == 0
    # store: false, as Codex sends it: nothing is kept.
    assert http.get(f"/v1/responses/{completed['response']['id']}").status_code == 404


# ---- Claude Code (captured from running code) ------------------------------------------


def anthropic_events(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    """Server-sent events as the anthropic SDK's stream reads them: ``event:`` + ``data:``."""
    events: list[tuple[str, dict[str, Any]]] = []
    name = None
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            data = json.loads(line[len("data: ") :])
            assert name == data["type"], line
            events.append((name, data))
        else:
            assert line == "", line
    return events


@pytest.mark.parametrize("name", ["default", "default-nonstreaming"])
def test_claude_code_agent_request_over_the_context_is_a_400_it_shows(
    http: httpx.Client, name: str
) -> None:
    """Claude Code's own request: 12 tools, a system turn, ``thinking: adaptive``, betas.

    It is about 26,000 tokens, the demo model's context 2048: the answer must be a 400 in
    Anthropic's shape whose message Claude Code recognizes ("maximum context length"); it
    printed "Prompt is too long · the provider said: <message>". Never a silent cut.
    """
    recorded = request(load("claude_code.json"), name)
    body = json.loads(recorded["body"])
    assert recorded["path"] == "/v1/messages?beta=true"
    assert [m["role"] for m in body["messages"]] == ["user", "system"]
    assert len(body["tools"]) == 12 and body["max_tokens"] == 32000
    assert body["thinking"] == {"type": "adaptive", "display": "omitted"}
    response = replay(http, recorded)
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert re.fullmatch(
        r"This model's maximum context length is 2048 tokens, but the prompt has \d{5} tokens\. "
        r"Please reduce the length of the messages\.",
        error["error"]["message"],
    )


def test_claude_code_bare_request_streams_the_reply(
    http: httpx.Client, dialogues: dict[str, Any]
) -> None:
    """``--bare --tools ""``: the event sequence Claude Code reads, and the model's reply."""
    recorded = request(load("claude_code.json"), "bare")
    assert json.loads(recorded["body"])["stream"] is True
    response = http.send(build(http, recorded), stream=True)
    try:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        events = anthropic_events(response)
    finally:
        response.close()
    names = [n for n, _ in events if n != "ping"]
    deltas = names.count("content_block_delta")
    assert names == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * deltas,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0][1]["message"]
    assert start["model"] == MODEL and start["usage"]["input_tokens"] > 0
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert text == dialogues["fallback_reply"]
    (finish,) = [d for n, d in events if n == "message_delta"]
    assert finish["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert finish["usage"]["output_tokens"] > 0


# ---- LM Studio's listing (shape from LM Studio's REST docs, not replayed from a plugin) ---


def test_lmstudio_model_listing(http: httpx.Client) -> None:
    data = http.get("/api/v0/models").json()
    assert data["object"] == "list"
    (model,) = data["data"]
    assert model["id"] == MODEL
    assert model["object"] == "model"
    assert model["type"] == "llm"
    assert model["state"] == "loaded"
    assert model["arch"] == "qwen2"
    assert model["max_context_length"] == 2048
    assert model["loaded_context_length"] == 2048
    assert model["capabilities"] == ["tool_use"]
    assert model["compatibility_type"] == "openvino"
    assert model["quantization"] and model["publisher"]
    one = http.get(f"/api/v0/models/{MODEL}")
    assert one.status_code == 200 and one.json() == model
    missing = http.get("/api/v0/models/nope")
    assert missing.status_code == 404 and "nope" in missing.json()["error"]
