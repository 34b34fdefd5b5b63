"""llama-server as a remote (issue 26): a first ``sidelight serve`` whose remote ``llama`` is
llama.cpp's server on the demo model's GGUF, driven through the ``openai``, ``anthropic``
and ``ollama`` clients (whole and streamed; tools, a tool result and thinking, which
llama-server parses itself with ``--jinja``).

``test_llama_server_replayed`` is the CI test: llama-server's real answers were recorded
from a real build (llama.cpp vendored in the llama-cpp-python 0.3.36 sdist, built by
``bench/build_llama_cpp.py``; the exact ``llama-server --version`` is in the fixture's
``recorded_with``) into ``tests/fixtures/llama-server/exchanges.json``, and a loopback
server replays them (tests/server/llama_replay.py, which says how to re-record). What the
clients get through Sidelight is compared with what llama-server itself answered to the
same conversation (a direct call, recorded too), never with hard-coded text.

``test_llama_server_live`` runs the same against a real llama-server when
``SIDELIGHT_TEST_LLAMA_SERVER`` names its binary (e.g. the path
``python -m bench.build_llama_cpp`` prints). It is skipped otherwise and is not counted as
coverage: the replay is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

from tests.conftest import DIALOGUES
from tests.server.harness import ServerProcess, running_server
from tests.server.llama_replay import ALIAS, ReplayRemote, load_exchanges, running_llama_server
from tests.server.test_remotes import remote_cli
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

REMOTE = f"{ALIAS}@llama"
LIVE_ENV = "SIDELIGHT_TEST_LLAMA_SERVER"
LIVE_BINARY = os.environ.get(LIVE_ENV)  # read at import: each test's home drops SIDELIGHT_*
MAX_TOKENS = 48


def _dialogue(name: str) -> dict[str, Any]:
    data = json.loads(DIALOGUES.read_text(encoding="utf-8"))
    found: dict[str, Any] = next(d for d in data["dialogues"] if d["name"] == name)
    return found


HELLO = _dialogue("hello")["messages"]
THINK = _dialogue("think")["messages"]
TOOL = _dialogue("tool")
TOOL_RESULT = _dialogue("tool-result")
TOO_LONG: Any = [{"role": "user", "content": "Hello " * 2100}]  # ~2100 tokens; 2048 served


@contextmanager
def first_server(home: Path, remote_url: str) -> Iterator[ServerProcess]:
    """The laptop's server, with ``llama`` (``remote_url``) added by ``sidelight remote add``
    before it starts; yields once the remote's model is listed."""
    added = remote_cli(home, "add", "llama", remote_url)
    assert added.returncode == 0, added.stderr
    with running_server(home, None, env={"SIDELIGHT_REMOTE_REFRESH_SECONDS": "0.5"}) as server:

        def listed() -> bool:
            ids = [m["id"] for m in httpx.get(f"{server.base_url}/v1/models").json()["data"]]
            return REMOTE in ids

        wait_until(listed, "llama-server's model listed", 60)
        yield server


def _anthropic_tools() -> list[Any]:
    return [
        {
            "name": t["function"]["name"],
            "description": t["function"]["description"],
            "input_schema": t["function"]["parameters"],
        }
        for t in TOOL["tools"]
    ]


def _anthropic_tool_result() -> list[Any]:
    """tool-result's conversation as Anthropic's blocks."""
    user, call, result = TOOL_RESULT["messages"]
    use = call["tool_calls"][0]
    return [
        user,
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": use["id"],
                    "name": use["function"]["name"],
                    "input": use["function"]["arguments"],
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": use["id"], "content": result["content"]}
            ],
        },
    ]


def _openai_tool_result() -> list[Any]:
    messages: list[Any] = json.loads(json.dumps(TOOL_RESULT["messages"]))
    for call in messages[1]["tool_calls"]:
        call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
    return messages


def _ollama_shaped(tools: list[Any]) -> list[Any]:
    """The tools as the ``ollama`` client sends them: its models' field order (``required``
    before ``properties``). The tiny model sees the tools' JSON in its prompt, so the order
    changes its answer; the direct call it is compared with must use the same."""
    shaped = []
    for tool in tools:
        function, parameters = tool["function"], tool["function"]["parameters"]
        properties = {
            name: {"type": p["type"], "description": p["description"]}
            for name, p in parameters["properties"].items()
        }
        shaped.append(
            {
                "type": "function",
                "function": {
                    "name": function["name"],
                    "description": function["description"],
                    "parameters": {
                        "type": parameters["type"],
                        "required": parameters["required"],
                        "properties": properties,
                    },
                },
            }
        )
    return shaped


def drive(first_url: str, remote_url: str) -> dict[str, Any]:
    """Every client call of the test, through ``first_url`` (Sidelight) and directly to
    ``remote_url`` (llama-server, or its recording); what each returned, by name."""
    seen: dict[str, Any] = {}
    listing = httpx.get(f"{remote_url}/v1/models", timeout=30).json()["data"]
    seen["direct.listing"] = next(m for m in listing if m["id"] == ALIAS)
    cards = httpx.get(f"{first_url}/api/v0/models", timeout=30).json()["data"]
    seen["lmstudio.card"] = next(m for m in cards if m["id"] == REMOTE)
    with openai.OpenAI(base_url=f"{remote_url}/v1", api_key="none", max_retries=0) as direct:
        for name, messages in (("hello", HELLO), ("think", THINK)):
            reply = direct.chat.completions.create(
                model=ALIAS, messages=messages, temperature=0, max_tokens=MAX_TOKENS
            )
            seen[f"direct.{name}"] = reply.choices[0].message.model_dump()
        reply = direct.chat.completions.create(
            model=ALIAS,
            messages=TOOL["messages"],
            tools=TOOL["tools"],
            temperature=0,
            max_tokens=MAX_TOKENS,
        )
        seen["direct.tool"] = reply.choices[0].message.model_dump()
        reply = direct.chat.completions.create(
            model=ALIAS, messages=TOOL["messages"], tools=_ollama_shaped(TOOL["tools"]),
            temperature=0, max_tokens=MAX_TOKENS,
        )  # fmt: skip
        seen["direct.ollama_tool"] = reply.choices[0].message.model_dump()
        reply = direct.chat.completions.create(
            model=ALIAS,
            messages=_openai_tool_result(),
            tools=TOOL["tools"],
            temperature=0,
            max_tokens=MAX_TOKENS,
        )
        seen["direct.tool_result"] = reply.choices[0].message.model_dump()

    with openai.OpenAI(base_url=f"{first_url}/v1", api_key="none", max_retries=0) as client:
        whole = client.chat.completions.create(
            model=REMOTE, messages=HELLO, temperature=0, max_tokens=MAX_TOKENS
        )
        seen["openai.whole"] = whole.choices[0].message.content
        seen["openai.model"] = whole.model
        seen["openai.usage"] = whole.usage.model_dump() if whole.usage else None
        chunks = list(
            client.chat.completions.create(
                model=REMOTE, messages=HELLO, stream=True,
                stream_options={"include_usage": True}, temperature=0, max_tokens=MAX_TOKENS,
            )
        )  # fmt: skip
        seen["openai.stream"] = "".join(
            c.choices[0].delta.content or "" for c in chunks if c.choices
        )
        seen["openai.stream_usage"] = chunks[-1].usage.model_dump() if chunks[-1].usage else None
        think = list(
            client.chat.completions.create(
                model=REMOTE, messages=THINK, stream=True, temperature=0, max_tokens=MAX_TOKENS
            )
        )
        deltas = [c.choices[0].delta for c in think if c.choices]
        seen["openai.think"] = {
            "reasoning": "".join(getattr(d, "reasoning_content", None) or "" for d in deltas),
            "content": "".join(d.content or "" for d in deltas),
        }
        called = client.chat.completions.create(
            model=REMOTE,
            messages=TOOL["messages"],
            tools=TOOL["tools"],
            temperature=0,
            max_tokens=MAX_TOKENS,
        )
        seen["openai.tool"] = {
            "finish": called.choices[0].finish_reason,
            "calls": [
                (c.function.name, json.loads(c.function.arguments))
                for c in called.choices[0].message.tool_calls or []
                if c.type == "function"
            ],
        }
        streamed = list(
            client.chat.completions.create(
                model=REMOTE,
                messages=TOOL["messages"],
                tools=TOOL["tools"],
                stream=True,
                temperature=0,
                max_tokens=MAX_TOKENS,
            )
        )
        names, arguments = [], ""
        for chunk in streamed:
            for piece in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                if piece.function and piece.function.name:
                    names.append(piece.function.name)
                if piece.function and piece.function.arguments:
                    arguments += piece.function.arguments
        seen["openai.tool_stream"] = {"names": names, "arguments": json.loads(arguments or "{}")}
        result = client.chat.completions.create(
            model=REMOTE,
            messages=_openai_tool_result(),
            tools=TOOL["tools"],
            temperature=0,
            max_tokens=MAX_TOKENS,
        )
        seen["openai.tool_result"] = result.choices[0].message.content

        try:  # over llama-server's context (Sidelight's own byte check lets it through)
            client.chat.completions.create(model=REMOTE, messages=TOO_LONG, max_tokens=4)
        except openai.BadRequestError as exc:
            seen["openai.too_long"] = (exc.status_code, exc.code, exc.message)
        try:  # llama-server serves embeddings only when started with --embeddings
            client.embeddings.create(model=REMOTE, input=["Hello"])
        except openai.BadRequestError as exc:
            seen["openai.embeddings"] = (exc.status_code, exc.code, exc.message)

    with anthropic.Anthropic(base_url=first_url, api_key="none", max_retries=0) as claude:
        try:
            claude.messages.create(model=REMOTE, max_tokens=4, messages=TOO_LONG)
        except anthropic.BadRequestError as exc:
            seen["anthropic.too_long"] = (exc.status_code, exc.message)
        extra = {"temperature": 0}
        message = claude.messages.create(
            model=REMOTE, max_tokens=MAX_TOKENS, messages=HELLO, extra_body=extra
        )
        seen["anthropic.whole"] = "".join(b.text for b in message.content if b.type == "text")
        seen["anthropic.usage"] = message.usage.model_dump()
        with claude.messages.stream(
            model=REMOTE, max_tokens=MAX_TOKENS, messages=HELLO, extra_body=extra
        ) as stream:
            seen["anthropic.stream"] = "".join(stream.text_stream)
        counted = claude.messages.count_tokens(model=REMOTE, messages=HELLO)
        seen["anthropic.count"] = counted.input_tokens
        thought = claude.messages.create(
            model=REMOTE, max_tokens=MAX_TOKENS, messages=THINK, extra_body=extra
        )
        seen["anthropic.think"] = {
            "thinking": "".join(b.thinking for b in thought.content if b.type == "thinking"),
            "text": "".join(b.text for b in thought.content if b.type == "text"),
        }
        used = claude.messages.create(
            model=REMOTE, max_tokens=MAX_TOKENS, messages=TOOL["messages"],
            tools=_anthropic_tools(), extra_body=extra,
        )  # fmt: skip
        seen["anthropic.tool"] = {
            "stop": used.stop_reason,
            "uses": [(b.name, b.input) for b in used.content if b.type == "tool_use"],
        }
        answered = claude.messages.create(
            model=REMOTE, max_tokens=MAX_TOKENS, messages=_anthropic_tool_result(),
            tools=_anthropic_tools(), extra_body=extra,
        )  # fmt: skip
        seen["anthropic.tool_result"] = "".join(
            b.text for b in answered.content if b.type == "text"
        )

    with ollama.Client(host=first_url, timeout=120) as local:
        options = {"num_predict": MAX_TOKENS, "temperature": 0}
        seen["ollama.whole"] = local.chat(
            model=REMOTE, messages=HELLO, options=options
        ).message.content
        parts = local.chat(model=REMOTE, messages=HELLO, options=options, stream=True)
        seen["ollama.stream"] = "".join(p.message.content or "" for p in parts)
        tooled = local.chat(
            model=REMOTE, messages=TOOL["messages"], tools=TOOL["tools"], options=options
        )
        seen["ollama.tool"] = [
            (c.function.name, dict(c.function.arguments)) for c in tooled.message.tool_calls or []
        ]
    return seen


def check(seen: dict[str, Any]) -> None:
    """What every client got through Sidelight is what llama-server answered directly."""
    # The context llama-server serves (its listing's meta.n_ctx) is the remote model's.
    served = seen["direct.listing"]["meta"]["n_ctx"]
    assert seen["lmstudio.card"]["max_context_length"] == served > 0
    hello = seen["direct.hello"]["content"]
    assert hello
    for name in (
        "openai.whole", "openai.stream", "anthropic.whole", "anthropic.stream",
        "ollama.whole", "ollama.stream",
    ):  # fmt: skip
        assert seen[name] == hello, name
    assert seen["openai.model"] == REMOTE
    usage = seen["openai.usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert seen["openai.stream_usage"] == usage
    # Anthropic counts the prefix cache's reads apart from input_tokens (llama-server says
    # how many it reused: prompt_tokens_details.cached_tokens).
    said = seen["anthropic.usage"]
    assert said["input_tokens"] + (said["cache_read_input_tokens"] or 0) == usage["prompt_tokens"]
    assert seen["anthropic.count"] == usage["prompt_tokens"]

    # Thinking arrives as llama-server parsed it: its own reasoning_content when it splits
    # <think> off (templates it knows to think), else the tags in the text, as it sent them.
    think = seen["direct.think"]
    reasoning, content = think.get("reasoning_content") or "", think["content"]
    assert reasoning + content
    assert seen["openai.think"] == {"reasoning": reasoning, "content": content}
    assert seen["anthropic.think"] == {"thinking": reasoning, "text": content}

    direct_calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in seen["direct.tool"]["tool_calls"] or []
    ]
    assert direct_calls and direct_calls[0][0] == "get_weather"
    assert seen["openai.tool"] == {"finish": "tool_calls", "calls": direct_calls}
    assert seen["openai.tool_stream"] == {
        "names": [n for n, _ in direct_calls],
        "arguments": direct_calls[0][1],
    }
    assert seen["anthropic.tool"] == {"stop": "tool_use", "uses": direct_calls}
    ollama_calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in seen["direct.ollama_tool"]["tool_calls"] or []
    ]
    assert seen["ollama.tool"] == ollama_calls
    # llama-server's refusals come back as 4xx naming it, in each dialect's shape.
    status, code, message = seen["openai.too_long"]
    assert (status, code) == (400, "context_length_exceeded")
    assert message.startswith("Error code: 400") and "remote 'llama': " in message
    assert (
        seen["anthropic.too_long"][0] == 400 and "remote 'llama': " in seen["anthropic.too_long"][1]
    )
    status, code, message = seen["openai.embeddings"]
    assert (status, code) == (400, "remote_unsupported") and "remote 'llama': " in message
    answer = seen["direct.tool_result"]["content"]
    assert answer
    assert seen["openai.tool_result"] == answer == seen["anthropic.tool_result"]


def test_llama_server_replayed(tmp_path: Path) -> None:
    facts, exchanges = load_exchanges()
    assert facts["llama_server"].startswith("version")
    with ReplayRemote(exchanges) as replay, first_server(tmp_path / "first", replay.url) as first:
        seen = drive(first.base_url, replay.url)
    assert replay.unmatched == [], replay.unmatched
    check(seen)


@pytest.mark.skipif(not LIVE_BINARY, reason=f"{LIVE_ENV} names no llama-server")
def test_llama_server_live(tmp_path: Path) -> None:
    """Not coverage (skipped in CI): the same against a real llama-server."""
    binary = Path(LIVE_BINARY or "")
    with (
        running_llama_server(binary, tmp_path / "llama-server.log") as upstream,
        first_server(tmp_path / "first", upstream) as first,
    ):
        seen = drive(first.base_url, upstream)
    check(seen)
