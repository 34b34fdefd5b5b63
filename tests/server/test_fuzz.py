"""Property-based fuzzing of a running ``sidelight serve``: hostile requests on every route.

Properties, checked after every request (requests are sent one at a time, so a failure is
the request's own):

- no 5xx except the deliberate 501 (unsupported) and 503 (engine not ready); a 503 while
  the engine was ready is a failure too, also for a request sent beside a flood of idle
  sockets (up to 300, held open while it is answered: they must not lock it out);
- no traceback or internal source path in a body;
- an answer within :data:`REQUEST_TIMEOUT` (no hang) on a connection that stays open;
- the engine worker did not exit (``/health`` ``worker_pid`` and ``restarts`` unchanged);

and after the run ``/health`` is ``ready`` with no active request.

The run is bounded in time: :data:`FUZZ_SECONDS` (60 s; ``SIDELIGHT_FUZZ_SECONDS`` for longer
runs). It goes in rounds of Hypothesis runs; a round stops at its first new kind of failure
(after shrinking it a little; a worker crash is not shrunk, since every replay would crash
the worker again and the engine gives up after three crashes a minute), the failure is
recorded and the next round looks for others. The test reports every distinct failure (kind,
method, route, status, and the exception the server logged meanwhile) with the shortest
request that showed it, rather than only the first one.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.database import DirectoryBasedExampleDatabase

from tests.server.fuzz_requests import FuzzRequest, Models, hostile_requests
from tests.server.harness import (
    ServerProcess,
    running_server,
    store_embedding_model,
    store_rerank_model,
)
from tests.server.idle_sockets import idle_flood

pytestmark = pytest.mark.slow

# Read at import: the autouse ``sidelight_home`` fixture clears SIDELIGHT_* variables.
FUZZ_SECONDS = float(os.environ.get("SIDELIGHT_FUZZ_SECONDS", "60"))
ROUND_EXAMPLES = 200
SHRINK_CALLS = 40  # requests a round may spend shrinking one failure
REQUEST_TIMEOUT = 30.0
RECOVERY_SECONDS = 60.0
BODY_KEPT = 64 * 1024
DELIBERATE_5XX = frozenset({501, 503})
EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit)):", re.MULTILINE)
LEAK = re.compile(rb'Traceback \(most recent call last\)|File "[^"]+\.py", line|\.(cpp|hpp|h):\d+')


class NewFinding(Exception):
    """Raised inside a Hypothesis run so it shrinks (and then stops at) a new failure."""


@dataclass(frozen=True)
class Signature:
    """One kind of failure: what went wrong, where, and the exception the server logged."""

    kind: str
    method: str
    route: str
    status: int | None
    cause: str | None

    def __str__(self) -> str:
        status = f" -> {self.status}" if self.status is not None else ""
        cause = f" [{self.cause}]" if self.cause else ""
        return f"{self.kind}: {self.method} {self.route}{status}{cause}"


@dataclass
class Sighting:
    count: int
    example: str
    answer: str


@dataclass
class Catalogue:
    """Every distinct failure seen, with the shortest request that showed it."""

    sightings: dict[Signature, Sighting] = field(default_factory=dict)
    settled: set[Signature] = field(default_factory=set)
    requests: int = 0

    def see(self, signature: Signature, request: FuzzRequest, answer: str) -> bool:
        """Record a failure; True while it is new (not yet settled by a finished round)."""
        example = request.summary()
        known = self.sightings.get(signature)
        if known is None:
            self.sightings[signature] = Sighting(1, example, answer)
        else:
            known.count += 1
            if len(example) < len(known.example):
                known.example, known.answer = example, answer
        return signature not in self.settled

    def settle(self) -> None:
        self.settled |= set(self.sightings)

    def report(self, seconds: float) -> str:
        lines = [
            f"{len(self.sightings)} distinct failures in {self.requests} requests "
            f"over {seconds:.0f} s:"
        ]
        for signature in sorted(self.sightings, key=str):
            seen = self.sightings[signature]
            lines.append(f"- {signature} (x{seen.count})")
            lines.append(f"    request: {seen.example}")
            lines.append(f"    answer:  {seen.answer}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Health:
    state: str
    worker_pid: int | None
    restarts: int
    active: int
    unloaded: str | None = None  # why the default model went away, when it did on purpose
    model: str | None = None


def read_health(http: httpx.Client) -> Health:
    body = http.get("/health").json()
    return Health(
        body["status"],
        body["worker_pid"],
        body["restarts"],
        body["requests"]["active"],
        body.get("unloaded"),
        body.get("model"),
    )


class ServerLog:
    """The server's output from a mark on: what it logged while serving one request."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.mark = 0

    def advance(self) -> None:
        self.mark = self.path.stat().st_size

    def cause(self) -> str | None:
        """The last exception the server (or its worker) logged since the mark, if any."""
        with self.path.open("rb") as log:
            log.seek(self.mark)
            text = log.read().decode("utf-8", "replace")
        names = EXCEPTION_LINE.findall(text)
        return names[-1].rsplit(".", 1)[-1] if names else None


class Prober:
    """Sends one fuzz request at a time and checks the properties after each."""

    def __init__(self, server: ServerProcess, http: httpx.Client, deadline: float) -> None:
        self.server = server
        self.log = ServerLog(server.log_path)
        self.http = http
        self.deadline = deadline
        self.catalogue = Catalogue()
        self.health = read_health(http)
        self.outage: str | None = None
        self.shrink_calls = 0

    def active(self) -> bool:
        return self.outage is None and time.monotonic() < self.deadline

    def probe(self, request: FuzzRequest) -> None:
        """The Hypothesis property: raises :class:`NewFinding` on a failure not seen before."""
        if not self.active() or self.shrink_calls > SHRINK_CALLS:
            return  # budget spent (or this round's shrinking is): nothing more to send
        if self.shrink_calls:
            self.shrink_calls += 1
        self.catalogue.requests += 1
        failures = self._failures(request)
        new = [sig for sig, answer in failures if self.catalogue.see(sig, request, answer)]
        if any(sig.kind in ("worker exited", "outage") for sig, _ in failures):
            # Not shrunk: every replay would crash the worker again, and the engine gives up
            # after a few crashes a minute, which would end the survey of other routes.
            self.shrink_calls = SHRINK_CALLS + 1
        if new:
            self.shrink_calls = self.shrink_calls or 1
            raise NewFinding("; ".join(str(sig) for sig in new))

    def end_round(self) -> None:
        self.catalogue.settle()
        self.shrink_calls = 0

    # ---- checks ----------------------------------------------------------------------

    def _failures(self, request: FuzzRequest) -> list[tuple[Signature, str]]:
        ready_before = self.health.state == "ready"
        self.log.advance()
        failures = self._answer_failures(request, ready_before)
        worker = self._worker_failure()
        if worker is not None:
            failures.append((worker, None, ""))
        cause = self.log.cause() if failures else None
        return [
            (Signature(kind, request.method, request.route, status, cause), answer)
            for kind, status, answer in failures
        ]

    def _answer_failures(
        self, request: FuzzRequest, ready_before: bool
    ) -> list[tuple[str, int | None, str]]:
        try:
            status, body = self._send(request)
        except httpx.TimeoutException as exc:
            return [("no answer in time", None, repr(exc))]
        except httpx.TransportError as exc:
            return [("connection dropped", None, repr(exc))]
        answer = f"{status} {body[:300]!r}"
        failures: list[tuple[str, int | None, str]] = []
        if status >= 500 and status not in DELIBERATE_5XX:
            failures.append(("5xx", status, answer))
        if status == 503 and ready_before:
            failures.append(("503 while the engine was ready", status, answer))
        if LEAK.search(body):
            failures.append(("internal detail in the body", status, answer))
        return failures

    def _send(self, request: FuzzRequest) -> tuple[int, bytes]:
        """Status and (the start of) the body, read as a stream so streamed answers end too."""
        kept = bytearray()
        flood = idle_flood(self.server.port, request.flood)
        try:
            with self.http.stream(
                request.method, request.path, content=request.body, headers=request.headers
            ) as response:
                for chunk in response.iter_bytes():
                    if len(kept) < BODY_KEPT:
                        kept += chunk
        finally:
            for sock in flood:
                sock.close()
        return response.status_code, bytes(kept)

    def _worker_failure(self) -> str | None:
        """A worker exit since the last request (then wait for recovery), or an outage."""
        before = self.health
        try:
            self.health = read_health(self.http)
        except httpx.HTTPError:
            self.health = Health("unreachable", None, before.restarts, 0)
        if self.health.state == "idle" and self.health.unloaded is not None:
            # Unloaded on purpose (a request's keep_alive 0): the next request loads it again.
            return self._reload(before.model or self.health.model)
        if self.health.worker_pid == before.worker_pid and self.health.restarts == before.restarts:
            return None if self.health.state == "ready" else self._recover("engine not ready")
        return self._recover("worker exited")

    def _reload(self, model: str | None) -> str | None:
        """Load the default model again after a requested unload (not a finding, unless it
        does not come back)."""
        if model is not None:
            with contextlib.suppress(httpx.HTTPError):
                self.http.post("/api/generate", json={"model": model}, timeout=RECOVERY_SECONDS)
        kind = self._recover("not loaded again after keep_alive 0")
        return None if kind != "outage" else kind

    def _recover(self, kind: str) -> str:
        """Wait for ``ready``; ``kind`` (a finding) if it comes back, an outage if not."""
        until = time.monotonic() + RECOVERY_SECONDS
        while time.monotonic() < until and self.server.process.poll() is None:
            try:
                self.health = read_health(self.http)
            except httpx.HTTPError:
                pass
            else:
                if self.health.state == "ready":
                    return kind
            time.sleep(0.5)
        self.outage = f"{kind}, then not ready within {RECOVERY_SECONDS:.0f} s"
        return "outage"


def _only_findings(exc: BaseException) -> bool:
    """Whether ``exc`` (perhaps a group, as Hypothesis reports several) holds only findings."""
    group = getattr(exc, "exceptions", None)
    if group is not None:
        return all(_only_findings(inner) for inner in group)
    return isinstance(exc, NewFinding)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("fuzz-home")
    store_embedding_model(home)
    store_rerank_model(home)
    with running_server(home, tiny_model) as proc:
        yield proc


@pytest.fixture
def hypothesis_home(tmp_path: Path) -> Iterator[Path]:
    """Hypothesis's storage (example database, constants cache) in a tmp dir, not the repo."""
    set_hypothesis_home_dir(tmp_path / "hypothesis")
    yield tmp_path / "hypothesis"
    set_hypothesis_home_dir(None)


@pytest.mark.timeout(FUZZ_SECONDS + 4 * RECOVERY_SECONDS + 120)
def test_hostile_requests_never_break_the_server(
    server: ServerProcess, hypothesis_home: Path
) -> None:
    models = Models(
        chat=str(server.wait_ready()["model"]), embed="tiny-embed", rerank="tiny-rerank"
    )
    database = DirectoryBasedExampleDatabase(hypothesis_home / "examples")
    started = time.monotonic()
    timeout = httpx.Timeout(REQUEST_TIMEOUT, connect=5.0)
    # A fresh connection per request: after a 500 the server closes the connection, and a
    # pooled one would fail the next, innocent request.
    fresh = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(base_url=server.base_url, timeout=timeout, limits=fresh) as http:
        prober = Prober(server, http, deadline=started + FUZZ_SECONDS)

        @settings(
            max_examples=ROUND_EXAMPLES,
            deadline=None,
            database=database,
            phases=[Phase.reuse, Phase.generate, Phase.shrink],
            suppress_health_check=list(HealthCheck),
            verbosity=Verbosity.quiet,
        )
        @given(request=hostile_requests(models))
        def one_round(request: FuzzRequest) -> None:
            prober.probe(request)

        while prober.active():
            try:
                one_round()
            except Exception as exc:
                if not _only_findings(exc):
                    raise
            prober.end_round()

        settled = _wait_settled(http)
    report = prober.catalogue.report(time.monotonic() - started)
    assert prober.outage is None, f"the server did not recover: {prober.outage}\n{report}"
    assert settled.state == "ready" and settled.active == 0, f"after the run: {settled}\n{report}"
    assert not prober.catalogue.sightings, report


def _wait_settled(http: httpx.Client, seconds: float = 30.0) -> Health:
    """``/health`` once no request is active (or whatever it says after ``seconds``)."""
    until = time.monotonic() + seconds
    health = read_health(http)
    while (health.active or health.state != "ready") and time.monotonic() < until:
        time.sleep(0.5)
        health = read_health(http)
    return health
