"""``count_only`` requests: the worker templates and counts a prompt without generating.

Anthropic's ``count_tokens`` needs the prompt's size as the model will see it (chat
template, tools), also for a prompt over the context, and must not cost a prefill. A real
worker (both backends) on the demo model, over a real pipe.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine.models import spec_from_path
from engine.worker.messages import (
    Event,
    Finished,
    GenerationRequest,
    LoadModel,
    ModelLoaded,
    RequestAccepted,
    RequestRejected,
    Submit,
    TextDelta,
)
from tests.conftest import TINY_MODEL, dialogue
from tests.engine.test_worker_robustness import _InProcessWorker


def _ends(request_ids: set[int]) -> Any:
    ended: dict[int, Event] = {}

    def until(event: Event) -> bool:
        if isinstance(event, Finished | RequestRejected):
            ended[event.request_id] = event
        return set(ended) == request_ids

    return until


@pytest.mark.parametrize("backend", ["batched", "serial"])
def test_count_only_counts_the_templated_prompt_without_generating(
    backend: str, dialogues: dict[str, Any]
) -> None:
    tool = dialogue(dialogues, "tool")
    worker = _InProcessWorker()
    try:
        worker.send(LoadModel(spec_from_path(TINY_MODEL), "CPU", {}, 1.0, backend=backend))
        worker.events(lambda e: isinstance(e, ModelLoaded))
        generated = GenerationRequest(1, tool["messages"], max_tokens=5, tools=tool["tools"])
        counted = GenerationRequest(2, tool["messages"], tools=tool["tools"], count_only=True)
        # Far over the demo model's 2048-token context: counted all the same.
        long = [{"role": "user", "content": "word " * 3000}]
        counted_long = GenerationRequest(3, long, max_tokens=10, count_only=True)
        for request in (generated, counted, counted_long):
            worker.send(Submit(request))
        seen = worker.events(_ends({1, 2, 3}))
    finally:
        worker.close()
    accepted = {e.request_id: e for e in seen if isinstance(e, RequestAccepted)}
    finished = {e.request_id: e for e in seen if isinstance(e, Finished)}
    assert accepted[2].prompt_tokens == accepted[1].prompt_tokens > 100  # the tools count
    assert accepted[3].prompt_tokens > 3000
    for rid in (2, 3):
        assert finished[rid].finish_reason == "stop"
        assert finished[rid].prompt_tokens == accepted[rid].prompt_tokens
        assert finished[rid].completion_tokens == 0
    assert not [e for e in seen if isinstance(e, TextDelta) and e.request_id in (2, 3)]
