"""Speculative decoding (prompt lookup, a draft model) never changes greedy output.

Real pipelines on the tiny demo model, in this process: a plain batched backend and one
per kind of speculation, the same requests through each. The demo model's greedy reply is
known; a second request quotes it in the prompt (a rewrite whose answer is in the prompt),
so prompt lookup has something to find and must accept some of it.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from engine.models import spec_from_path
from engine.worker.backends import LOOKUP_FULL_MAX_TEMPERATURE, Backend
from engine.worker.messages import (
    Event,
    Finished,
    GenerationRequest,
    LoadModel,
    OutputConstraint,
    RequestRejected,
    SamplingParams,
    TextDelta,
)
from engine.worker.process import _build_backend
from tests.conftest import ROOT

DEMO = ROOT / "resources" / "models" / "sidelight-demo"
GREEDY = SamplingParams(temperature=0, ignore_eos=True)
HELLO = [{"role": "user", "content": "Hello"}]
_ids = iter(range(1, 1_000_000))


def _load(**fields: Any) -> Backend:
    spec = spec_from_path(DEMO)
    return _build_backend(
        LoadModel(spec=spec, device="CPU", properties={}, kv_cache_gb=1, **fields)
    )


def _run(backend: Backend, **fields: Any) -> tuple[str, Finished]:
    """One request through ``backend`` to its end: its text and its ``Finished``."""
    events: list[Event] = []
    request = GenerationRequest(request_id=next(_ids), **fields)
    events.extend(backend.submit(request))
    while backend.has_work():
        backend.step(events.extend, lambda: None)
    assert not [e for e in events if isinstance(e, RequestRejected)], events
    finished = [e for e in events if isinstance(e, Finished)]
    assert len(finished) == 1, events
    assert finished[0].error is None, finished[0].error
    text = "".join(e.text for e in events if isinstance(e, TextDelta)) + finished[0].text
    return text, finished[0]


@pytest.fixture(scope="module")
def plain() -> Iterator[Backend]:
    backend = _load()
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def lookup() -> Iterator[Backend]:
    backend = _load(prompt_lookup=True, speculative_tokens=4)
    yield backend
    backend.close()


def _rewrite(reply: str) -> list[dict[str, str]]:
    """A chat whose answer is in the prompt: the model's own reply, asked for again."""
    return [*HELLO, {"role": "assistant", "content": reply}, *HELLO]


def test_plain_pipeline_counts_one_token_per_step(plain: Backend) -> None:
    text, done = _run(plain, messages=HELLO, max_tokens=40, sampling=GREEDY)
    assert text.startswith("Hello! I am the Sidelight demo model")
    assert (done.speculation, done.accepted_tokens) == ("off", 0)
    assert done.decode_steps == done.completion_tokens == 40


def test_prompt_lookup_output_is_plain_greedy_output(plain: Backend, lookup: Backend) -> None:
    assert lookup.speculation == "prompt_lookup"
    reply, _ = _run(plain, messages=HELLO, max_tokens=40, sampling=GREEDY)
    for messages in (HELLO, _rewrite(reply)):
        expected, plain_done = _run(plain, messages=messages, max_tokens=60, sampling=GREEDY)
        text, done = _run(lookup, messages=messages, max_tokens=60, sampling=GREEDY)
        assert text == expected
        assert done.completion_tokens == plain_done.completion_tokens == 60
        assert done.speculation == "prompt_lookup"
        # Every step yields one checked token plus the guesses it accepted.
        assert done.decode_steps + done.accepted_tokens == done.completion_tokens
        assert done.accepted_tokens > 0  # the reply repeats text of its prompt
        assert done.decode_steps < plain_done.decode_steps


def test_prompt_lookup_keeps_stop_strings_and_schemas(plain: Backend, lookup: Backend) -> None:
    """A stop string inside an accepted run of guesses still ends the reply where it is."""
    stop = dict(messages=HELLO, max_tokens=60, sampling=GREEDY, stop=("demo model",))
    expected, plain_done = _run(plain, **stop)
    text, done = _run(lookup, **stop)
    assert (
        (text, done.finish_reason)
        == (expected, plain_done.finish_reason)
        == (
            "Hello! I am the Sidelight ",
            "stop",
        )
    )
    schema = json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}})
    constrained = dict(
        messages=HELLO,
        max_tokens=30,
        sampling=SamplingParams(temperature=0),
        constraint=OutputConstraint(json_schema=schema),
    )
    assert _run(lookup, **constrained)[0] == _run(plain, **constrained)[0]


def test_zero_speculative_tokens_turns_speculation_off() -> None:
    backend = _load(prompt_lookup=True, speculative_tokens=0)
    try:
        assert backend.speculation == "off"
        _, done = _run(backend, messages=HELLO, max_tokens=8, sampling=GREEDY)
        assert (done.accepted_tokens, done.decode_steps) == (0, 8)
    finally:
        backend.close()


def test_a_draft_model_pair_loads_and_keeps_greedy_output(plain: Backend) -> None:
    """The demo model drafting for itself: the only same-vocabulary pair that exists here,
    so every guess is accepted (an upper bound; it shows the mechanics, not a speed-up)."""
    backend = _load(draft_path=str(DEMO), speculative_tokens=4)
    try:
        assert backend.speculation == "draft"
        expected, _ = _run(plain, messages=HELLO, max_tokens=40, sampling=GREEDY)
        text, done = _run(backend, messages=HELLO, max_tokens=40, sampling=GREEDY)
        assert text == expected
        assert done.speculation == "draft"
        assert done.decode_steps + done.accepted_tokens == 40
        assert done.decode_steps <= 40 // 3  # up to 5 tokens a step once decoding runs
    finally:
        backend.close()


def test_a_draft_that_cannot_pair_falls_back_to_prompt_lookup(tmp_path: Any) -> None:
    backend = _load(draft_path=str(tmp_path), prompt_lookup=True)  # no model there
    try:
        assert backend.speculation == "prompt_lookup"
        _, done = _run(backend, messages=HELLO, max_tokens=8, sampling=GREEDY)
        assert done.speculation == "prompt_lookup"
    finally:
        backend.close()


def test_a_damaged_draft_is_checked_before_openvino_and_lookup_runs(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A draft folder whose weights are cut short never reaches OpenVINO's IR reader (the
    file check names it in the log); the model is served with prompt lookup."""
    draft = tmp_path / "draft"
    shutil.copytree(DEMO, draft)
    weights = draft / "openvino_model.bin"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with caplog.at_level(logging.WARNING):
        backend = _load(draft_path=str(draft), prompt_lookup=True)
    try:
        assert backend.speculation == "prompt_lookup"
        assert "openvino_model.bin is cut short" in caplog.text, caplog.text
        assert "cannot pair" not in caplog.text  # not the library's refusal
    finally:
        backend.close()


def test_a_draft_of_another_vocabulary_is_refused_and_lookup_runs() -> None:
    """tiny-coder's tokenizer is not the demo model's: GenAI refuses the pair."""
    backend = _load(draft_path=str(ROOT / "tests" / "fixtures" / "tiny-coder"), prompt_lookup=True)
    try:
        assert backend.speculation == "prompt_lookup"
    finally:
        backend.close()


def test_prompt_lookup_runs_on_a_gguf_model(plain: Backend) -> None:
    spec = spec_from_path(ROOT / "tests" / "fixtures" / "sidelight-demo-f16.gguf")
    backend = _build_backend(
        LoadModel(spec=spec, device="CPU", properties={}, kv_cache_gb=1, prompt_lookup=True)
    )
    try:
        assert backend.speculation == "prompt_lookup"
        text, done = _run(backend, messages=HELLO, max_tokens=30, sampling=GREEDY)
        assert done.decode_steps + done.accepted_tokens == 30
        assert text.startswith("Hello! I am the Sidelight demo model")
    finally:
        backend.close()


def test_sampled_and_logprob_requests_run_on_a_lookup_pipeline(lookup: Backend) -> None:
    sampled = SamplingParams(temperature=1.0, seed=7, top_p=0.9, ignore_eos=True)
    text, done = _run(lookup, messages=HELLO, max_tokens=30, sampling=sampled)
    assert done.completion_tokens == 30 and text
    events: list[Event] = []
    events.extend(
        lookup.submit(
            GenerationRequest(
                request_id=next(_ids), messages=HELLO, max_tokens=20, sampling=GREEDY, logprobs=True
            )
        )
    )
    while lookup.has_work():
        lookup.step(events.extend, lambda: None)
    logprobs = [p for e in events if isinstance(e, TextDelta) for p in e.logprobs]
    assert logprobs and all(p.logprob <= 0 for p in logprobs)


def test_the_serial_pipeline_counts_steps_without_speculation() -> None:
    """LLMPipeline (the NPU's path) runs no speculation even when it is asked for."""
    backend = _load(backend="serial", prompt_lookup=True)
    try:
        assert backend.speculation == "off"
        _, done = _run(backend, messages=HELLO, max_tokens=12, sampling=GREEDY)
        assert (done.speculation, done.accepted_tokens, done.decode_steps) == ("off", 0, 12)
    finally:
        backend.close()


def test_sampled_requests_accept_guesses_too(lookup: Backend) -> None:
    """Speculative sampling: a guess is accepted with the model's probability of it, so a
    confident model that samples still takes guesses (no request opts out; see
    Backend._speculate)."""
    sampled = SamplingParams(temperature=0.01, seed=3, ignore_eos=True)
    _, done = _run(lookup, messages=HELLO, max_tokens=60, sampling=sampled)
    assert done.accepted_tokens > 0
    assert done.decode_steps + done.accepted_tokens == 60


def test_hot_sampled_requests_guess_one_token_a_step(lookup: Backend) -> None:
    """A request sampled at LOOKUP_FULL_MAX_TEMPERATURE or above guesses one token a step
    on a prompt-lookup pipeline, so it takes at most one guess a step; a greedy request
    still guesses four. The demo model loops after its trained reply, so both find
    guesses in their own text (a confident model accepts many even when it samples)."""
    hot = SamplingParams(temperature=LOOKUP_FULL_MAX_TEMPERATURE, seed=3, ignore_eos=True)
    _, done = _run(lookup, messages=HELLO, max_tokens=200, sampling=hot)
    assert done.decode_steps + done.accepted_tokens == done.completion_tokens == 200
    assert 0 < done.accepted_tokens <= done.decode_steps
    _, greedy = _run(lookup, messages=HELLO, max_tokens=200, sampling=GREEDY)
    assert greedy.accepted_tokens > greedy.decode_steps  # more than one guess a step taken
