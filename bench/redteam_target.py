"""The server under attack, and what one category of attacks did to it (a row of the table).

Only ``http://127.0.0.1:PORT`` is accepted: the campaign never sends traffic elsewhere.
Every request goes on a fresh connection (no keep-alive), so one refused or crashed request
never fails the next one on a pooled socket.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

logger = logging.getLogger(__name__)

DELIBERATE_5XX = frozenset({501, 503})
# Python tracebacks and native source locations (GenAI's C++ exceptions carry them).
LEAK = re.compile(rb'Traceback \(most recent call last\)|File "[^"]+\.py", line|\.(cpp|hpp|h):\d+')
BODY_KEPT = 256 * 1024


@dataclass
class Row:
    """What one category did: attempts, and the harm each column of the table counts."""

    category: str
    attempts: int = 0
    crashes: int = 0
    outage: bool = False
    bypasses: int = 0
    server_errors: int = 0
    leaks: int = 0
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, other: Row) -> None:
        """Count ``other``'s attempts and harm here (a thread's tally, once joined)."""
        self.attempts += other.attempts
        self.bypasses += other.bypasses
        self.server_errors += other.server_errors
        self.leaks += other.leaks

    def note(self, text: str) -> None:
        logger.info("%s: %s", self.category, text)
        self.notes.append(text)


@dataclass(frozen=True)
class Answer:
    """A response's status and the start of its body (``status`` 0: no response at all)."""

    status: int
    body: bytes
    seconds: float
    headers: dict[str, str]
    error: str | None = None

    @property
    def served(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        return httpx.Response(self.status, content=self.body).json()


class Target:
    """A running Sidelight server on 127.0.0.1."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname != "127.0.0.1" or parts.port is None:
            raise ValueError(f"{url}: the campaign only attacks http://127.0.0.1:PORT")
        self.url = f"http://127.0.0.1:{parts.port}"
        self.port = parts.port
        self.timeout = timeout
        self.http = httpx.Client(
            base_url=self.url,
            timeout=httpx.Timeout(timeout, connect=5.0),
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    def close(self) -> None:
        self.http.close()

    def health(self) -> dict[str, Any] | None:
        try:
            body: dict[str, Any] = self.http.get("/health", timeout=5.0).json()
        except (httpx.HTTPError, ValueError):
            return None
        return body

    def wait_ready(self, seconds: float) -> dict[str, Any] | None:
        """``/health`` once it says ready (None if not within ``seconds``)."""
        until = time.monotonic() + seconds
        while True:
            health = self.health()
            if health is not None and health.get("status") == "ready":
                return health
            if time.monotonic() >= until:
                return None
            time.sleep(0.5)

    def send(
        self,
        row: Row,
        method: str,
        path: str,
        *,
        body: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> Answer:
        """One attempt: counts it, and any 5xx or leaked internals, on ``row``.

        ``body`` is sent as JSON written by :func:`json.dumps` (ASCII, ``Infinity``/``NaN``
        allowed), so lone surrogates and non-finite numbers reach the server as they are;
        httpx's own encoder refuses both.
        """
        if body is not None:
            content = json.dumps(body).encode("ascii")
            headers = {"Content-Type": "application/json", **(headers or {})}
        row.attempts += 1
        started = time.monotonic()
        kept = bytearray()
        try:
            with self.http.stream(
                method,
                path,
                content=content,
                headers=headers,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            ) as response:
                for chunk in response.iter_bytes():
                    if len(kept) < BODY_KEPT:
                        kept += chunk
            answer = Answer(
                response.status_code,
                bytes(kept),
                time.monotonic() - started,
                dict(response.headers),
            )
        except httpx.HTTPError as exc:
            return Answer(0, b"", time.monotonic() - started, {}, error=repr(exc))
        if answer.status >= 500 and answer.status not in DELIBERATE_5XX:
            row.server_errors += 1
        if LEAK.search(answer.body):
            row.leaks += 1
        return answer


def crashes_between(before: dict[str, Any] | None, after: dict[str, Any] | None) -> int:
    """Worker exits between two ``/health`` readings.

    Each restart counts; the crash after which the engine gives up (state ``error``, worker
    gone) does not increment ``restarts``, so it is added here.
    """
    if before is None:
        return 0
    restarts = int((after or {}).get("restarts", before["restarts"])) - int(before["restarts"])
    gave_up = (
        after is not None
        and after.get("status") == "error"
        and "crashed" in str(after.get("message"))
        and before.get("status") != "error"
    )
    return restarts + int(gave_up)


def table(rows: list[Row]) -> str:
    """The Markdown table the campaign prints."""
    lines = [
        "| category | attempts | worker crashes | permanent outage | Host/Origin bypasses "
        "| 5xx | tracebacks/internals in bodies | seconds | notes |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        notes = "; ".join(row.notes).replace("|", "\\|") or "-"
        lines.append(
            f"| {row.category} | {row.attempts} | {row.crashes} | "
            f"{'YES' if row.outage else 'no'} | {row.bypasses} | {row.server_errors} | "
            f"{row.leaks} | {row.seconds:.0f} | {notes} |"
        )
    return "\n".join(lines)
