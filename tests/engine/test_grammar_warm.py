"""The worker starts a loaded model's grammar compiler while idle (real worker, demo model).

GenAI builds its XGrammar compiler on the first constrained request (1.7-2.8 s for a 151k
vocabulary on two cores); the worker does it once after a load, when idle, so an agent's
first tool call does not wait for it. The pipeline must serve plain and constrained
requests as before afterwards.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest

from engine.models import spec_from_path
from engine.worker import process
from engine.worker.messages import (
    Event,
    Finished,
    GenerationRequest,
    LoadModel,
    ModelLoaded,
    OutputConstraint,
    Ping,
    Pong,
    RequestRejected,
    SamplingParams,
    Submit,
    TextDelta,
)
from tests.conftest import ROOT
from tests.engine.test_worker_robustness import _InProcessWorker

HELLO = [{"role": "user", "content": "Hello"}]


def _reply(worker: _InProcessWorker, request: GenerationRequest) -> tuple[str, Event]:
    worker.send(Submit(request))
    seen = worker.events(
        lambda e: isinstance(e, Finished | RequestRejected) and e.request_id == request.request_id
    )
    text = "".join(e.text for e in seen if isinstance(e, TextDelta))
    return text, seen[-1]


def test_the_grammar_compiler_starts_when_idle_and_requests_still_work(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(process, "WARM_GRAMMAR_AFTER_SECONDS", 0.3)
    worker = _InProcessWorker()
    try:
        model = spec_from_path(ROOT / "resources" / "models" / "sidelight-demo")
        with caplog.at_level(logging.INFO, logger="engine.worker.process"):
            worker.send(LoadModel(model, "CPU", {}, 1.0, backend="batched"))
            worker.events(lambda e: isinstance(e, ModelLoaded))
            # A request right after the load runs before any warm-up (the loop is busy).
            text, end = _reply(worker, GenerationRequest(1, HELLO, max_tokens=8))
            assert isinstance(end, Finished) and text
            for _ in range(100):
                if "grammar compiler started" in caplog.text:
                    break
                time.sleep(0.1)
            assert "grammar compiler started" in caplog.text
        assert caplog.text.count("grammar compiler started") == 1
        greedy = SamplingParams(temperature=0)
        text, end = _reply(worker, GenerationRequest(2, HELLO, max_tokens=8, sampling=greedy))
        assert isinstance(end, Finished) and text
        schema: dict[str, Any] = {"type": "integer", "minimum": 3, "maximum": 7}
        constraint = OutputConstraint(json.dumps(schema))
        request = GenerationRequest(3, HELLO, max_tokens=8, constraint=constraint)
        text, end = _reply(worker, request)
        assert isinstance(end, Finished) and 3 <= int(text) <= 7, text
    finally:
        worker.close()


def test_the_compiler_waits_for_quiet_after_the_load(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The idle wait starts at the load, not before it: a worker idle before its load does
    not start the compiler the moment the load ends, when the request the load was for is
    about to come in (nor do the watchdog's pings put it off)."""
    monkeypatch.setattr(process, "WARM_GRAMMAR_AFTER_SECONDS", 1.5)
    worker = _InProcessWorker()
    try:
        model = spec_from_path(ROOT / "resources" / "models" / "sidelight-demo")
        with caplog.at_level(logging.INFO, logger="engine.worker.process"):
            time.sleep(2.0)  # idle, with no model, longer than the wait
            worker.send(LoadModel(model, "CPU", {}, 1.0, backend="batched"))
            worker.events(lambda e: isinstance(e, ModelLoaded))
            time.sleep(0.5)
            assert "grammar compiler started" not in caplog.text
            for token in range(40):
                worker.send(Ping(token))
                worker.events(lambda e: isinstance(e, Pong))
                if "grammar compiler started" in caplog.text:
                    break
                time.sleep(0.2)
            assert "grammar compiler started" in caplog.text
    finally:
        worker.close()
