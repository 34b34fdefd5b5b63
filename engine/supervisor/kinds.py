"""Model kinds as data: what the scheduler needs to know to place each kind of model.

Every kind of model (chat, embedding, reranker today; vision-language, speech recognition
and speech synthesis next) runs in an engine worker process of its own. What differs
between kinds is a handful of facts, not a code path: whether the worker loads the model
when it starts or on its first request, who times its idle unload, which states mean "it
can take requests", and whether it needs the KV-cache budget. A new kind is one row of
:data:`KINDS` (and its pipeline in the worker); the scheduler reads only this table.

Pure data: no threads, no locks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from engine.models import TASKS, ModelTask
from engine.supervisor.states import ERROR, IDLE, READY, EngineState

IdleTimer = Literal["client", "scheduler"]
"""Who ends an idle model's worker: its client's keep-alive timer (Ollama's ``keep_alive``
and LM Studio's ``ttl`` apply to it), or the scheduler's owner loop after
``Settings.idle_unload_seconds`` unused."""


@dataclass(frozen=True)
class ModelKind:
    """How the scheduler places one kind of model.

    Attributes:
        task: the manifest's task this row is for.
        loads_at_start: the worker loads the model as soon as it starts (a chat model's
            ``LoadModel``); otherwise the model loads inside its first request, in the
            worker (embeddings, rerank), and a worker holding none still takes requests.
        serving_states: the states in which a waiting request may go on and read the
            worker's state itself (a failed load is ``error``: the caller says why).
        idle_timer: who ends the worker once the model has been idle (see
            :data:`IdleTimer`).
        kv_cache: the model's cost includes ``Settings.kv_cache_gb`` (it generates).
        loads_on_cpu_tune: a CPU load asks for the self-tune's properties (machine key
            read before the scheduler's lock: it costs one OpenVINO query once).
    """

    task: ModelTask
    loads_at_start: bool
    serving_states: frozenset[EngineState]
    idle_timer: IdleTimer
    kv_cache: bool
    loads_on_cpu_tune: bool


def _encoder(task: ModelTask) -> ModelKind:
    """An encoder (embeddings, rerank, transcription): loads in its first request, timed by the scheduler."""
    return ModelKind(
        task=task,
        loads_at_start=False,
        serving_states=frozenset({IDLE, READY, ERROR}),
        idle_timer="scheduler",
        kv_cache=False,
        loads_on_cpu_tune=False,
    )


def _generator(task: ModelTask) -> ModelKind:
    """A generating model (chat, vision-language): loads at start, its client times it."""
    return ModelKind(
        task=task,
        loads_at_start=True,
        serving_states=frozenset({READY, ERROR}),
        idle_timer="client",
        kv_cache=True,
        loads_on_cpu_tune=True,
    )


KINDS: Final[dict[ModelTask, ModelKind]] = {
    "chat": _generator("chat"),
    # A vision-language model: the continuous-batching worker with images beside text.
    "vision": _generator("vision"),
    "embeddings": _encoder("embeddings"),
    "rerank": _encoder("rerank"),
    "transcription": _encoder("transcription"),
    # Text to speech (SpeechT5): loads in its first request like an encoder, one piece of
    # text per request; no KV-cache budget of the scheduler's (GenAI keeps its own).
    "speech": _encoder("speech"),
}
assert set(KINDS) == set(TASKS), "every model task needs a row in KINDS"


def kind_of(task: ModelTask) -> ModelKind:
    """The row for ``task`` (every task has one: checked at import)."""
    return KINDS[task]
