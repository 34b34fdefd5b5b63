"""Hostile and malformed requests against a real ``sidelight serve``: 4xx naming the field.

The server holds the demo model (loaded), and in its store the tiny code model and the tiny
embedding model, so every dialect's generation and embedding routes are live. Each request
here once reached the engine worker (a crash and restart, a 500 with library text, a model
reloaded on every retry) or did work for a page on another web site. After each test the
worker must not have restarted.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, TINY_CODER, dialogue
from tests.server.harness import ServerProcess, running_server, store_ir_copy
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

DEMO = "sidelight-demo"
HELLO = [{"role": "user", "content": "Hello"}]
TINY_EMBED = ROOT / "tests" / "fixtures" / "tiny-embed"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("hardening-home")
    store_ir_copy(home / "models", "tiny-coder", TINY_CODER, task="chat", reasoning=False)
    store_ir_copy(home / "models", "tiny-embed", TINY_EMBED, task="embeddings", reasoning=False)
    with running_server(home, tiny_model) as proc:
        yield proc


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    """A client whose test fails if the engine worker restarted meanwhile (it crashed)."""
    restarts = server.health().json()["restarts"]
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        yield client
    assert server.health().json()["restarts"] == restarts, server.output()[-3000:]


def post(http: httpx.Client, path: str, raw: bytes | str, **headers: str) -> httpx.Response:
    """POST a body exactly as given (json= would refuse NaN or re-encode surrogates)."""
    body = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    return http.post(path, content=body, headers={"content-type": "application/json", **headers})


def error_of(response: httpx.Response, status: int) -> tuple[str, str | None]:
    """The message and param of an error answer in either shape (OpenAI's or Ollama's)."""
    assert response.status_code == status, response.text
    assert "Traceback" not in response.text
    error = response.json()["error"]
    if isinstance(error, str):
        return error, None
    return error["message"], error["param"]


def chat_body(**fields: Any) -> dict[str, Any]:
    return {"model": DEMO, "messages": HELLO, "max_tokens": 4, **fields}


def ollama_body(**options: Any) -> dict[str, Any]:
    return {"model": DEMO, "messages": HELLO, "stream": False, "options": options}


# ---- 1. sampling fields ----------------------------------------------------------------

SAMPLED = {"temperature": 0.8}


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/chat/completions", chat_body(**SAMPLED, seed=2**64), "seed"),
        ("/v1/chat/completions", chat_body(**SAMPLED, top_k=2**64), "top_k"),
        ("/v1/chat/completions", chat_body(**SAMPLED, top_k=2**63), "top_k"),
        ("/v1/chat/completions", chat_body(max_tokens=2**64), "max_tokens"),
        ("/v1/chat/completions", chat_body(max_completion_tokens=2**63), "max_completion_tokens"),
        (
            "/v1/chat/completions",
            chat_body(**SAMPLED, repetition_penalty=1e300),
            "repetition_penalty",
        ),
        ("/v1/chat/completions", chat_body(**SAMPLED, top_p=1e-300), "top_p"),
        ("/v1/chat/completions", chat_body(**SAMPLED, min_p=1.5), "min_p"),
        ("/v1/chat/completions", chat_body(top_logprobs=21), "top_logprobs"),
        ("/v1/chat/completions", chat_body(n=2), "n"),
        ("/v1/completions", {"model": DEMO, "prompt": "Hi", "top_k": 2**64}, "top_k"),
        ("/v1/completions", {"model": DEMO, "prompt": "Hi", "seed": 2**70}, "seed"),
        ("/v1/completions", {"model": DEMO, "prompt": "Hi", "logprobs": 6}, "logprobs"),
        ("/api/chat", ollama_body(**SAMPLED, seed=2**64), "options.seed"),
        ("/api/chat", ollama_body(**SAMPLED, top_k=2**64), "options.top_k"),
        ("/api/chat", ollama_body(num_predict=2**64), "options.num_predict"),
        ("/api/chat", ollama_body(num_ctx=2**64), "options.num_ctx"),
        ("/api/chat", ollama_body(repeat_last_n="all"), "options.repeat_last_n"),
        ("/api/chat", ollama_body(mirostat="on"), "options.mirostat"),
        ("/api/chat", ollama_body(temperature=1e39), "options.temperature"),
        ("/api/chat", ollama_body(repeat_penalty=0), "options.repeat_penalty"),
        ("/api/chat", ollama_body(stop=["x"] * 17), "options.stop"),
        (
            "/api/generate",
            {"model": DEMO, "prompt": "Hi", "stream": False, "options": {"top_k": 2**64}},
            "options.top_k",
        ),
        ("/api/embed", {"model": "tiny-embed", "input": "x", "dimensions": 2**64}, "dimensions"),
    ],
)
def test_out_of_range_numbers_are_400_naming_the_field(
    http: httpx.Client, path: str, body: dict[str, Any], field: str
) -> None:
    message, param = error_of(post(http, path, json.dumps(body)), 400)
    assert message.startswith(f"{field}:"), message
    assert param in (None, field)


@pytest.mark.parametrize(
    ("path", "raw", "field"),
    [
        ("/v1/chat/completions", '"temperature": NaN', "temperature"),
        ("/v1/chat/completions", '"repetition_penalty": Infinity', "repetition_penalty"),
        ("/v1/chat/completions", '"frequency_penalty": -Infinity', "frequency_penalty"),
        ("/v1/chat/completions", '"top_p": 1e999', "top_p"),
        ("/v1/chat/completions", '"vendor_extra": {"weight": NaN}', "vendor_extra.weight"),
        ("/v1/completions", '"temperature": NaN', "temperature"),
        ("/api/chat", '"options": {"repeat_penalty": Infinity}', "options.repeat_penalty"),
        ("/api/chat", '"options": {"typical_p": NaN}', "options.typical_p"),
        ("/api/chat", '"keep_alive": NaN', "keep_alive"),
        ("/api/embed", '"keep_alive": Infinity', "keep_alive"),
    ],
)
def test_nan_and_infinity_are_refused(http: httpx.Client, path: str, raw: str, field: str) -> None:
    if path == "/api/embed":
        base = '{"model": "tiny-embed", "input": "x", '
    elif path == "/v1/completions":
        base = '{"model": "sidelight-demo", "prompt": "Hi", '
    else:
        base = '{"model": "sidelight-demo", "messages": [{"role": "user", "content": "Hi"}], '
    message, _ = error_of(post(http, path, base + raw + "}"), 400)
    assert message.startswith(f"{field}:") and "finite" in message, message


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", chat_body(**SAMPLED, seed=-1)),
        ("/v1/chat/completions", chat_body(**SAMPLED, seed=-123456789)),
        ("/v1/chat/completions", chat_body(**SAMPLED, seed=2**64 - 1, top_k=2**63 - 1)),
        (
            "/v1/completions",
            {"model": DEMO, "prompt": "Hi", "max_tokens": 4, **SAMPLED, "seed": -1},
        ),
        ("/api/chat", ollama_body(num_predict=4, **SAMPLED, seed=-1)),
        ("/api/chat", ollama_body(num_predict=4, **SAMPLED, top_k=-5, repeat_last_n=-1)),
        (
            "/api/generate",
            {"model": DEMO, "prompt": "Hi", "stream": False, "options": {"seed": -1, **SAMPLED}},
        ),
    ],
)
def test_negative_seeds_mean_random_and_big_values_reach_the_engine(
    http: httpx.Client, path: str, body: dict[str, Any]
) -> None:
    response = post(http, path, json.dumps(body))
    assert response.status_code == 200, response.text


def _reply(http: httpx.Client, path: str, body: dict[str, Any]) -> str:
    response = post(http, path, json.dumps(body))
    assert response.status_code == 200, response.text
    data = response.json()
    if path == "/api/chat":
        return str(data["message"]["content"])
    return str(data["choices"][0]["message"]["content"])


@pytest.mark.parametrize(
    ("path", "body"),
    [
        # top_p 0 and min_p 1 keep only the likeliest token (GenAI refuses both values).
        ("/v1/chat/completions", {"temperature": 1.5, "top_p": 0}),
        ("/v1/chat/completions", {"temperature": 1.5, "min_p": 1}),
        ("/api/chat", {"options": {"temperature": 1.5, "top_p": 0}}),
        ("/api/chat", {"options": {"temperature": 1.5, "top_p": -3}}),  # Ollama clamps to 0
        ("/api/chat", {"options": {"temperature": 1.5, "min_p": 7}}),  # Ollama clamps to 1
        ("/api/chat", {"options": {"temperature": -1}}),  # Ollama clamps to 0: greedy
        # Ollama passes any penalty; GenAI holds them to [-2, 2].
        ("/api/chat", {"options": {"temperature": 0, "presence_penalty": 5}}),
        ("/api/chat", {"options": {"temperature": 0, "frequency_penalty": -9}}),
    ],
)
def test_values_meaning_greedy_or_clamped_give_the_greedy_reply(
    http: httpx.Client, dialogues: dict[str, Any], path: str, body: dict[str, Any]
) -> None:
    hello = dialogue(dialogues, "hello")
    request = {"model": DEMO, "messages": hello["messages"], "stream": False, **body}
    reply = _reply(http, path, request)
    if "penalty" in json.dumps(body):
        assert reply  # a penalty changes the reply; it must just be served
    else:
        assert reply == hello["reply"]


# ---- 2. lone surrogates ----------------------------------------------------------------

SURROGATE = "\\ud800"  # as it travels: a JSON escape of an unpaired surrogate


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/completions", {"model": DEMO, "prompt": "@@"}, "prompt"),
        ("/v1/completions", {"model": DEMO, "prompt": ["@@"]}, "prompt.0"),
        ("/v1/completions", {"model": "tiny-coder", "prompt": "a", "suffix": "@@"}, "suffix"),
        (
            "/v1/chat/completions",
            chat_body(messages=[{"role": "user", "content": "@@"}]),
            "messages.0.content",
        ),
        ("/v1/chat/completions", chat_body(stop=["@@"]), "stop.0"),
        ("/v1/chat/completions", chat_body(model="@@"), "model"),
        (
            "/v1/chat/completions",
            chat_body(tools=[{"type": "function", "function": {"name": "f", "description": "@@"}}]),
            "tools.0.function.description",
        ),
        ("/v1/embeddings", {"model": "tiny-embed", "input": "@@"}, "input"),
        ("/v1/embeddings", {"model": "tiny-embed", "input": ["ok", "@@"]}, "input.1"),
        ("/api/generate", {"model": DEMO, "prompt": "@@", "raw": True, "stream": False}, "prompt"),
        (
            "/api/chat",
            {"model": DEMO, "messages": [{"role": "user", "content": "@@"}]},
            "messages.0.content",
        ),
        ("/api/embed", {"model": "tiny-embed", "input": ["@@"]}, "input.0"),
        ("/api/embeddings", {"model": "tiny-embed", "prompt": "@@"}, "prompt"),
        ("/api/show", {"model": "@@"}, "model"),
    ],
)
def test_a_lone_surrogate_is_400_naming_the_field(
    http: httpx.Client, path: str, body: dict[str, Any], field: str
) -> None:
    raw = json.dumps(body).replace("@@", SURROGATE)
    message, param = error_of(post(http, path, raw), 400)
    assert message.startswith(f"{field}:") and "surrogate" in message, message
    assert param in (None, field)


def test_a_surrogate_in_a_key_is_400(http: httpx.Client) -> None:
    raw = json.dumps(chat_body(chat_template_kwargs={"@@": 1})).replace("@@", SURROGATE)
    message, _ = error_of(post(http, "/v1/chat/completions", raw), 400)
    assert message.startswith("chat_template_kwargs:") and "surrogate" in message


def test_a_surrogate_pair_is_text(http: httpx.Client) -> None:
    body = {"model": DEMO, "prompt": "Hi \\ud83c\\udf0d", "max_tokens": 2}
    assert post(http, "/v1/completions", json.dumps(body).replace("\\\\", "\\")).status_code == 200


# ---- 3. nesting and schema size ----------------------------------------------------------

POST_ROUTES = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/api/chat",
    "/api/generate",
    "/api/embed",
    "/api/embeddings",
    "/api/show",
]


@pytest.mark.parametrize("path", POST_ROUTES)
@pytest.mark.parametrize("opener", ["[", '{"a":'])
def test_10000_deep_json_is_400(http: httpx.Client, path: str, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    message, _ = error_of(post(http, path, opener * 10_000 + "0" + closer * 10_000), 400)
    assert "nested deeper than" in message


def nested_schema(levels: int) -> dict[str, Any]:
    """An object schema with ``levels`` objects inside one another (two JSON levels each)."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def tool(parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "f", "parameters": parameters}}


@pytest.mark.parametrize("levels", [240, 20])  # past the body's bound; past the schema's only
@pytest.mark.parametrize(
    ("path", "make", "field"),
    [
        ("/v1/chat/completions", lambda s: chat_body(tools=[tool(s)]), "tools"),
        (
            "/v1/chat/completions",
            lambda s: chat_body(
                response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": s}}
            ),
            "response_format",
        ),
        ("/api/chat", lambda s: {"model": DEMO, "messages": HELLO, "tools": [tool(s)]}, "tools"),
        ("/api/chat", lambda s: {"model": DEMO, "messages": HELLO, "format": s}, "format"),
        ("/api/generate", lambda s: {"model": DEMO, "prompt": "Hi", "format": s}, "format"),
    ],
)
def test_deep_schemas_are_400_naming_the_field(
    http: httpx.Client, path: str, make: Any, field: str, levels: int
) -> None:
    message, _ = error_of(post(http, path, json.dumps(make(nested_schema(levels)))), 400)
    assert message.startswith(f"{field}:") and "nested deeper than" in message, message


def test_huge_tool_schema_is_400(http: httpx.Client) -> None:
    properties = {f"p{i}": {"type": "string"} for i in range(6000)}
    body = chat_body(tools=[tool({"type": "object", "properties": properties})])
    message, _ = error_of(post(http, "/v1/chat/completions", json.dumps(body)), 400)
    assert message.startswith("tools:") and "values" in message


def test_a_schema_with_a_bad_type_is_400_not_500(http: httpx.Client) -> None:
    bad: Any
    for bad in ({}, [[]], 5):
        body = chat_body(tools=[tool({"type": bad})])
        message, _ = error_of(post(http, "/v1/chat/completions", json.dumps(body)), 400)
        assert message.startswith("tools:"), message
    body = {"model": DEMO, "messages": HELLO, "format": {"type": "object", "pattern": "(" * 2000}}
    error_of(post(http, "/api/chat", json.dumps(body)), 400)


# ---- 4. Host header --------------------------------------------------------------------


@pytest.mark.parametrize(
    "host", ["127.evil.example", "127.0.0.1.rebind.attacker.example", "localhost.evil.example:80"]
)
def test_names_that_look_like_loopback_are_refused(http: httpx.Client, host: str) -> None:
    for path in ("/v1/models", "/api/tags"):
        response = http.get(path, headers={"Host": host})
        assert response.status_code == 403, (host, path)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2:9", "localhost:1", "tray.localhost"])
def test_loopback_hosts_are_served(http: httpx.Client, host: str) -> None:
    assert http.get("/v1/models", headers={"Host": host}).status_code == 200


# ---- 5. cross-site requests ------------------------------------------------------------


def test_a_cross_site_simple_post_does_no_work(http: httpx.Client, server: ServerProcess) -> None:
    """What a page on any site can send without a preflight: it must not start a generation."""
    before = server.health().json()["requests"]["completed"]
    body = json.dumps({"model": DEMO, "prompt": "Hi", "stream": False})
    for content_type in ("text/plain;charset=UTF-8", "application/x-www-form-urlencoded"):
        for path in ("/api/generate", "/v1/completions"):
            headers = {"content-type": content_type, "origin": "https://evil.example"}
            response = http.post(path, content=body, headers=headers)
            message = error_of(response, 403)[0]
            assert "evil.example" in message
    assert server.health().json()["requests"]["completed"] == before


@pytest.mark.parametrize(
    ("content_type", "headers"),
    [
        ("text/plain", {}),
        ("text/plain;charset=UTF-8", {}),
        ("multipart/form-data; boundary=x", {}),
        ("application/xml", {}),
        ("application/x-www-form-urlencoded", {"sec-fetch-site": "cross-site"}),
        ("application/x-www-form-urlencoded", {"origin": "http://localhost:5173"}),
        (None, {"sec-fetch-site": "same-site"}),
    ],
)
def test_a_body_that_is_not_declared_json_is_415(
    http: httpx.Client, content_type: str | None, headers: dict[str, str]
) -> None:
    body = json.dumps(chat_body())
    if content_type is not None:
        headers = {**headers, "content-type": content_type}
    for path in ("/v1/chat/completions", "/api/chat"):
        message, _ = error_of(http.post(path, content=body, headers=headers), 415)
        assert "application/json" in message


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_d_as_in_ollamas_docs_still_works(server: ServerProcess) -> None:
    """``curl -d`` sends application/x-www-form-urlencoded and no browser headers."""
    body = json.dumps(
        {"model": DEMO, "prompt": "Hi", "stream": False, "options": {"num_predict": 2}}
    )
    result = subprocess.run(
        ["curl", "-s", "-d", body, f"{server.base_url}/api/generate"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert json.loads(result.stdout)["done"] is True


def test_an_allowed_origin_keeps_cors_working(http: httpx.Client) -> None:
    origin = "http://localhost:5173"
    preflight = http.options(
        "/v1/chat/completions",
        headers={"origin": origin, "access-control-request-method": "POST"},
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == origin
    response = post(http, "/v1/chat/completions", json.dumps(chat_body()), origin=origin)
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == origin


# ---- 8. model names --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["TINY-CODER", " tiny-coder", "Tiny-Coder "])
def test_model_names_ignore_case_and_spaces(
    http: httpx.Client, server: ServerProcess, name: str
) -> None:
    for _ in range(2):  # the second request finds the model loaded: no reload, no 503
        response = post(http, "/v1/chat/completions", json.dumps(chat_body(model=name)))
        assert response.status_code == 200, response.text
        assert response.json()["model"] == "tiny-coder"
    loads = server.output().count("request for tiny-coder: switching")
    response = post(
        http, "/api/chat", json.dumps({**ollama_body(num_predict=2), "model": f"{name}:LATEST"})
    )
    assert response.status_code == 200, response.text
    assert server.output().count("request for tiny-coder: switching") == loads
    assert http.get(f"/v1/models/{name.strip()}").json()["id"] == "tiny-coder"
    assert http.get(f"/api/v0/models/{name.strip()}").json()["id"] == "tiny-coder"
    assert post(http, "/api/show", json.dumps({"model": name})).status_code == 200
    embed = post(http, "/v1/embeddings", json.dumps({"model": "TINY-EMBED ", "input": "x"}))
    assert embed.status_code == 200 and embed.json()["model"] == "tiny-embed"


def test_unknown_names_are_404_everywhere(http: httpx.Client) -> None:
    error_of(post(http, "/v1/chat/completions", json.dumps(chat_body(model="nope"))), 404)
    error_of(post(http, "/api/chat", json.dumps({**ollama_body(), "model": "nope"})), 404)
    assert http.get("/v1/models/nope").status_code == 404
    assert http.get("/api/v0/models/nope").status_code == 404


# ---- 9. /api/embed bounds --------------------------------------------------------------


def test_api_embed_is_bounded_like_v1_embeddings(http: httpx.Client) -> None:
    for path in ("/api/embed", "/v1/embeddings"):
        too_many = {"model": "tiny-embed", "input": ["x"] * 2049}
        message, _ = error_of(post(http, path, json.dumps(too_many)), 400)
        assert message.startswith("input:") and "2048" in message
        message, _ = error_of(
            post(http, path, json.dumps({"model": "tiny-embed", "input": []})), 400
        )
        assert message == "input: must not be empty"
    fine = post(http, "/api/embed", json.dumps({"model": "tiny-embed", "input": ["a", "b", "c"]}))
    assert len(fine.json()["embeddings"]) == 3


# ---- 10. junk ----------------------------------------------------------------------------

JUNK: list[Any] = [None, 0, -1, 1.5, True, "", "x" * 20_000, [], {}, [[]], [{}], {"a": []}]
VALID = {
    "/v1/chat/completions": chat_body(
        tools=[tool({"type": "object"})],
        response_format={"type": "json_object"},
        stop=["x"],
        stream_options={"include_usage": True},
    ),
    "/v1/completions": {"model": DEMO, "prompt": "Hi", "max_tokens": 2, "suffix": None},
    "/v1/embeddings": {"model": "tiny-embed", "input": ["a"], "dimensions": 4},
    "/api/chat": {
        "model": DEMO,
        "messages": [{"role": "user", "content": "Hi"}],
        "stream": False,
        "tools": [tool({"type": "object"})],
        "format": {"type": "object"},
        "options": {"num_predict": 2, "stop": ["x"]},
    },
    "/api/generate": {
        "model": DEMO,
        "prompt": "Hi",
        "stream": False,
        "options": {"num_predict": 2},
    },
    "/api/embed": {"model": "tiny-embed", "input": ["a"], "options": {}},
    "/api/embeddings": {"model": "tiny-embed", "prompt": "Hi"},
    "/api/show": {"model": DEMO},
}


@pytest.mark.parametrize("path", POST_ROUTES)
def test_junk_in_any_top_level_field_is_never_a_5xx(http: httpx.Client, path: str) -> None:
    valid = VALID[path]
    for field in valid:
        for junk in JUNK:
            response = post(http, path, json.dumps({**valid, field: junk}))
            assert response.status_code < 500, (field, junk, response.text)
            assert "Traceback" not in response.text


@pytest.mark.parametrize("path", POST_ROUTES)
@pytest.mark.parametrize(
    "raw",
    [b"", b"null", b"[]", b'"x"', b"\xff\xfe\xfd", b'{"model": "\xc3"}', b"1" * 5000, b"{"],
    ids=["empty", "null", "array", "string", "bad-utf8", "bad-utf8-inside", "long-int", "cut"],
)
def test_unparseable_bodies_are_400(http: httpx.Client, path: str, raw: bytes) -> None:
    message, _ = error_of(post(http, path, raw), 400)
    assert "Traceback" not in message


def test_a_client_gone_mid_body_is_no_error(server: ServerProcess) -> None:
    """A client that hangs up halfway through its body (a slowloris giving up) is routine:
    the server notes it, logs no traceback and stays healthy."""
    before = server.output().count("Traceback")
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"mo'
            )
            time.sleep(0.2)
    wait_until(lambda: "client went away" in server.output(), "'client went away' logged", 5)
    assert server.output().count("Traceback") == before, server.output()[-3000:]
    assert server.health().json()["status"] == "ready"


def test_a_client_gone_before_a_whole_answer_is_no_error(server: ServerProcess) -> None:
    """A non-streamed request whose client hangs up mid-generation is cancelled in the
    engine and logged as routine, not as an unhandled server error."""
    before = server.output().count("Traceback")
    body = json.dumps(chat_body(max_tokens=1500, temperature=1.0, seed=1, ignore_eos=True)).encode()
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )
        time.sleep(0.5)
    wait_until(
        lambda: "client went away during POST /v1/chat/completions" in server.output(),
        lambda: f"the hang-up logged:\n{server.output()[-3000:]}",
        10,
    )
    assert server.output().count("Traceback") == before, server.output()[-3000:]
    assert "unhandled error" not in server.output()
    health = server.health().json()
    assert health["status"] == "ready" and health["requests"]["active"] == 0
