"""The two ways the worker drives OpenVINO GenAI.

``BatchedBackend`` (CPU, GPU): one ``ContinuousBatchingPipeline`` with prefix caching; every
loop iteration adds new requests, runs one ``step()`` and reads each handle, so concurrent
requests share each forward pass. ``step()`` holds the GIL, which is why this code lives in
its own process.

``SerialBackend`` (NPU, or when asked): ``LLMPipeline`` with static shapes serves one request
at a time; others wait in a queue. The streamer callback polls for commands so a cancel
still lands within one token.

Both merge deltas that come faster than the stream interval (the first goes at once): every
delta sent wakes the server and its client, and on a 2-core laptop each wake-up preempts an
inference thread. A held delta goes out with the next one, or just before ``Finished``.

One request never takes the others down with it: whatever fails while it is prepared or
read ends that request alone. A ``step()`` that raises leaves a ``ContinuousBatchingPipeline``
unusable (GenAI 2026.4: every later step fails with "already in scheduling phase"), so the
worker reloads the model; a grammar is compiled first on the :class:`GrammarProbe` (in a
child process: a constrained request with a new grammar is held, outside the pipeline,
until :meth:`Backend.probed` gives its verdict, while every other request keeps stepping),
and constrained requests join the pipeline one per step and are accepted only after their
first step, so a failing grammar that got past the probe is blamed on its request (a 400),
and the requests that had produced nothing yet are carried over to the reloaded pipeline.

Threading: both are used only from the worker's single loop thread.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from engine.worker.encode import encoding_limit
from engine.worker.errors import PIPE_ERRORS, short_error
from engine.worker.grammar_probe import GrammarProbe, Verdict, compile_once
from engine.worker.messages import (
    Event,
    Finished,
    FinishReason,
    GenerationRequest,
    RejectCode,
    RequestAccepted,
    RequestRejected,
    Speculation,
    TextDelta,
    TokenLogprob,
)
from engine.worker.prefix_ledger import Found, PrefixLedger
from engine.worker.prepare import PreparedRequest, RequestError, find_fim_tokens, prepare
from engine.worker.textstream import IncrementalDetokenizer
from engine.worker.vision import ImageTokens, to_tensor

logger = logging.getLogger(__name__)

# Sampled at this temperature or above, a request on a prompt-lookup pipeline guesses one
# token a step instead of ``speculative_tokens`` (see ``Backend._speculate``).
LOOKUP_FULL_MAX_TEMPERATURE = 0.5

Emit = Callable[[list[Event]], None]


@dataclass
class _Active:
    """Book-keeping for one running request."""

    request_id: int
    prompt_tokens: int
    detok: IncrementalDetokenizer
    prepared: PreparedRequest
    accepted: RequestAccepted
    param: str | None = None  # the field a constrained request's grammar came from
    announced: bool = False  # RequestAccepted was sent
    handle: Any = None
    submitted: float = field(default_factory=time.perf_counter)
    first_token: float | None = None
    last_token: float | None = None
    completion_tokens: int = 0
    want_logprobs: bool = False
    interval: float = 0.0  # seconds between sent deltas (0: send every one)
    last_sent: float | None = None
    held: TextDelta | None = None
    speculation: Speculation = "off"
    decode_steps: int = 0  # steps that produced tokens for this request
    accepted_tokens: int = 0  # tokens beyond one per such step: accepted guesses
    count_only: bool = False  # only counted: accepted and finished once its grammar is known
    probed: bool = True  # False while its grammar waits for the probe's verdict
    lazy_grammar: bool = False  # its grammar is optional (tool_choice auto): dropped if bad
    cached_tokens: int = 0  # prompt tokens the prefix cache held when it joined the pipeline
    generated_ids: list[int] | None = None  # its reply's ids, kept for the prefix ledger
    found: Found | None = None  # what the prefix ledger found for it

    def on_step(self, count: int) -> None:
        """Count one engine step's ``count`` new tokens (speculation yields more than one)."""
        if count > 0:
            self.decode_steps += 1
            self.accepted_tokens += count - 1

    def on_tokens(self, count: int) -> None:
        now = time.perf_counter()
        if self.first_token is None:
            self.first_token = now
        self.last_token = now
        self.completion_tokens += count

    def delta(self, ids: list[int], logprobs: list[float]) -> TextDelta | None:
        """Decode new tokens into a delta (``None`` when nothing is ready to send)."""
        text = self.detok.push(ids)
        probs: tuple[TokenLogprob, ...] = ()
        if self.want_logprobs:
            texts = [
                (self.detok.token_text(t), float(lp)) for t, lp in zip(ids, logprobs, strict=False)
            ]
            probs = tuple(TokenLogprob(text, lp) for text, lp in texts if text)
        delta = TextDelta(self.request_id, text, len(ids), probs)
        if self.held is not None:
            delta, self.held = _merge(self.held, delta), None
        now = self.last_token or time.perf_counter()
        early = self.last_sent is not None and now - self.last_sent < self.interval
        if early or not (delta.text or delta.logprobs):  # hold it (and count its tokens)
            self.held = delta
            return None
        self.last_sent = now
        return delta

    @property
    def started(self) -> bool:
        """Whether anything of the reply exists yet (then it cannot move to a new pipeline)."""
        return self.completion_tokens > 0 or self.held is not None

    def ending(self, reason: FinishReason, text: str = "") -> list[Event]:
        """The events that end a request normally: any held delta, then ``Finished``."""
        held, self.held = self.held, None
        finished = self.finished(reason, text=text)
        if held is None or not (held.text or held.logprobs):
            return [finished]
        return [held, finished]

    def finished(self, reason: FinishReason, text: str = "", error: str | None = None) -> Finished:
        ttft = self.first_token - self.submitted if self.first_token else None
        decode = (
            self.last_token - self.first_token
            if self.first_token is not None and self.last_token is not None
            else None
        )
        return Finished(
            request_id=self.request_id,
            finish_reason=reason,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            ttft_seconds=ttft,
            decode_seconds=decode,
            text=text,
            error=error,
            stop_sequence=self.detok.stop.sequence if reason == "stop" else None,
            decode_steps=self.decode_steps,
            accepted_tokens=self.accepted_tokens,
            speculation=self.speculation,
            cached_tokens=self.cached_tokens,
        )


def _merge(first: TextDelta, second: TextDelta) -> TextDelta:
    return TextDelta(
        first.request_id,
        first.text + second.text,
        first.tokens + second.tokens,
        first.logprobs + second.logprobs,
    )


class Backend:
    """Common request intake: templating, tokenization, context checks."""

    name = "base"
    broken = False  # a failed step left the pipeline unusable; the worker rebuilds it

    def __init__(self, tokenizer: Any, base_config: Any, context_length: int | None) -> None:
        self.tokenizer = tokenizer
        self.base_config = base_config
        self.context_length = context_length
        self.chat_template: str | None = getattr(tokenizer, "chat_template", None) or None
        self.fim_tokens = find_fim_tokens(tokenizer)
        # A GGUF tokenizer cuts encodings on its own; prepare() encodes past it (or refuses).
        self.encoding_limit = encoding_limit(tokenizer, context_length)
        # NPU: the static prompt length the pipeline was compiled for (set by the worker).
        self.prompt_limit: int | None = None
        # Tokens that end a turn never become text (see IncrementalDetokenizer).
        hidden = {int(base_config.eos_token_id), *(int(t) for t in base_config.stop_token_ids)}
        for getter in ("get_bos_token_id", "get_pad_token_id", "get_eos_token_id"):
            value = getattr(tokenizer, getter, lambda: -1)()
            if isinstance(value, int) and value >= 0:
                hidden.add(value)
        self.hidden_ids = frozenset(hidden)
        self.stream_interval = 0.0  # set by the worker from LoadModel
        self.byte_table: dict[int, bytes] | None = None  # fast detokenizing, when it is exact
        self.grammar_probe: GrammarProbe | None = None  # set by the worker
        # Speculative decoding of the pipeline (set by the worker from LoadModel). GenAI
        # refuses a request without these fields on such a pipeline, so every request
        # carries them.
        self.speculation: Speculation = "off"
        self.speculative_tokens = 4
        self.max_ngram_size = 3
        # A vision-language model's image-token rule (set by the worker; None: text only),
        # and the most images one request may carry (NPU: one; None: the server's limit).
        self.image_tokens: ImageTokens | None = None
        self.max_images: int | None = None
        # After a failed step: requests that had produced nothing, for the next backend.
        self.survivors: list[_Active] = []
        # Requests whose grammar the probe is compiling, by grammar key, oldest first.
        self._probing: dict[str, list[_Active]] = {}

    def stop_on(self, token_ids: Collection[int]) -> None:
        """Make every id in ``token_ids`` a stop token of every request, hidden from the text.

        The model's declared end tokens (engine.worker.stop_tokens) that GenAI did not read
        itself: without this the model ran past them or their text reached the reply.
        Called once by the worker after the load, before any request.
        """
        ids = {int(t) for t in token_ids}
        tokenizer_eos = getattr(self.tokenizer, "get_eos_token_id", lambda: -1)()
        if isinstance(tokenizer_eos, int) and tokenizer_eos >= 0:  # its special-token EOS
            ids.add(tokenizer_eos)
        known = {int(t) for t in self.base_config.stop_token_ids}
        if ids - known:
            logger.info("stop tokens beyond GenAI's own: %s", sorted(ids - known))
        self.base_config.stop_token_ids = known | ids
        self.hidden_ids = self.hidden_ids | frozenset(ids)

    def _prepare(self, request: GenerationRequest) -> _Active | RequestRejected:
        """The request's running state, or why it cannot run (never raises)."""
        rid = request.request_id
        if self.max_images is not None and len(request.images) > self.max_images:
            message = (
                f"this model takes at most {self.max_images} image(s) a request on this "
                f"device; the request has {len(request.images)}"
            )
            return RequestRejected(rid, "invalid_request", message, "messages")
        try:
            prepared = prepare(
                request,
                self.tokenizer,
                self.base_config,
                self.context_length,
                self.fim_tokens,
                self.encoding_limit,
                self.prompt_limit,
                self.image_tokens,
            )
            detok = IncrementalDetokenizer(
                self.tokenizer, request.stop, self.hidden_ids, self.byte_table
            )
        except RequestError as exc:
            return RequestRejected(rid, exc.code, str(exc), exc.param)
        except (TypeError, ValueError, OverflowError) as exc:  # a value C++ cannot take
            logger.warning("request %d refused: %s", rid, exc)
            return RequestRejected(rid, "invalid_request", f"invalid request: {short_error(exc)}")
        except Exception as exc:
            logger.exception("preparing request %d failed", rid)
            return RequestRejected(rid, "internal", f"engine error: {short_error(exc)}")
        self._speculate(prepared.config)
        constraint = prepared.constraint
        probed = True
        key = prepared.grammar_key
        if constraint is not None and key is not None and self.grammar_probe is not None:
            verdict = self.grammar_probe.cached(key)
            if verdict is None:
                self.grammar_probe.request(key, constraint)
                probed = False
            elif verdict.error is not None:
                if not constraint.lazy:
                    return _grammar_rejected(rid, constraint.param, verdict.error)
                _drop_lazy_grammar(prepared, verdict.error)
        accepted = RequestAccepted(
            rid, prepared.prompt_tokens, prepared.max_tokens, prepared.opens_reasoning
        )
        return _Active(
            rid,
            prepared.prompt_tokens,
            detok,
            prepared,
            accepted,
            param=constraint.param if constraint is not None else None,
            want_logprobs=request.logprobs,
            interval=self.stream_interval,
            speculation=self.speculation,
            count_only=request.count_only,
            probed=probed,
            lazy_grammar=constraint is not None and constraint.lazy,
        )

    def _speculate(self, config: Any) -> None:
        """Give a request the fields its pipeline's speculative decoding needs.

        Every request guesses: GenAI 2026.4 refuses a request without these fields on such
        a pipeline (``num_assistant_tokens`` 0 included), and an n-gram longer than the
        sequence still matches shorter ones, so no request can opt out (the
        ``prompt_lookup`` setting turns it off for all). What a request can choose is how
        many tokens it guesses: on a prompt-lookup pipeline a request sampled at
        ``LOOKUP_FULL_MAX_TEMPERATURE`` or above guesses one token a step, the fewest GenAI
        takes. Its guesses are copies of the prompt, accepted with the model's probability
        of them, which sampling that hot rarely gives a run of; every guess is one more
        position the model computes (its output layer over the whole vocabulary included)
        and checks. Greedy and cool requests (code edits, rewrites, agents) guess
        ``speculative_tokens``. A draft model's guesses follow the model, so draft
        pipelines always guess ``speculative_tokens``. docs/benchmarks.md has the figures.
        """
        if self.speculation == "off":
            return
        config.num_assistant_tokens = self.speculative_tokens
        if self.speculation == "prompt_lookup":
            config.max_ngram_size = self.max_ngram_size
            if config.do_sample and config.temperature >= LOOKUP_FULL_MAX_TEMPERATURE:
                config.num_assistant_tokens = 1

    def submit(self, request: GenerationRequest) -> list[Event]:
        raise NotImplementedError

    def count(self, request: GenerationRequest) -> list[Event]:
        """A ``count_only`` request: templated and tokenized, accepted and finished at once
        (once its grammar is known to compile, as a generation's must)."""
        state = self._prepare(request)
        if isinstance(state, RequestRejected):
            return [state]
        if not state.probed:
            return self._hold(state)
        return [state.accepted, state.finished("stop")]

    def _hold(self, state: _Active) -> list[Event]:
        """Keep ``state`` aside until its grammar's verdict (see :meth:`probed`)."""
        key = state.prepared.grammar_key
        assert key is not None  # only constrained requests wait for the probe
        self._probing.setdefault(key, []).append(state)
        return []

    def probed(self, key: str, verdict: Verdict) -> list[Event]:
        """The probe's verdict on grammar ``key``: its waiting requests go on or are refused."""
        events: list[Event] = []
        for state in self._probing.pop(key, []):
            state.probed = True
            lazy = state.lazy_grammar
            if verdict.error is not None and lazy:
                _drop_lazy_grammar(state.prepared, verdict.error)
            if verdict.error is not None and not lazy:
                events.append(_grammar_rejected(state.request_id, state.param, verdict.error))
            elif state.count_only:
                events.extend([state.accepted, state.finished("stop")])
            else:
                events.extend(self._admit(state))
        return events

    def _admit(self, state: _Active) -> list[Event]:
        """Queue a prepared request whose grammar (if any) is known to compile."""
        raise NotImplementedError

    def _cancel_held(self, request_id: int) -> list[Event] | None:
        """Cancel a request waiting for its grammar's verdict (None: no such request)."""
        for key, states in self._probing.items():
            for state in states:
                if state.request_id == request_id:
                    states.remove(state)
                    if not states:
                        del self._probing[key]
                    return _cancelled(state)
        return None

    def _take_held(self) -> list[_Active]:
        """Every request waiting for a verdict, out of this backend."""
        held = [state for states in self._probing.values() for state in states]
        self._probing.clear()
        return held

    def cancel(self, request_id: int) -> list[Event]:
        raise NotImplementedError

    def has_work(self) -> bool:
        raise NotImplementedError

    def step(self, emit: Emit, poll: Callable[[], None]) -> None:
        """Advance every running request; never raises for one request's failure."""
        raise NotImplementedError

    def fail(self, error: str) -> list[Event]:
        """End every request after an unexpected failure; the worker then reloads the model."""
        raise NotImplementedError

    def adopt(self, states: list[_Active]) -> list[Event]:
        """Take over the survivors of a failed backend (default: they end with an error,
        but the ones still waiting for their grammar's verdict wait on here)."""
        events: list[Event] = []
        for state in states:
            if state.probed:
                events.append(_ended(state, "engine_restarting", "the engine was reloaded; retry"))
            else:
                self._hold(state)
        return events

    def close(self) -> list[Event]:
        """Drop every request (model unloaded); returns their Finished events."""
        raise NotImplementedError


def _tensor(ids: list[int]) -> Any:
    import numpy as np
    import openvino as ov

    return ov.Tensor(np.array([ids], dtype=np.int64))


def _drop_lazy_grammar(prepared: PreparedRequest, error: str) -> None:
    """Run a request whose optional (lazy tool-call) grammar cannot compile unconstrained."""
    logger.warning("tool-call grammar dropped (%s): calls unconstrained", error)
    prepared.config.structured_output_config = None


def _grammar_rejected(request_id: int, param: str | None, error: str) -> RequestRejected:
    param = param or "response_format"
    message = f"{param}: the JSON schema cannot be enforced: {error}"
    return RequestRejected(request_id, "invalid_request", message, param)


def _ended(state: _Active, code: RejectCode, message: str) -> Event:
    """How a request that cannot go on ends: an error if it was accepted, else a refusal."""
    if state.announced:
        return state.finished("error", error=message)
    return RequestRejected(state.request_id, code, message)


def _cancelled(state: _Active) -> list[Event]:
    """A cancelled request's last events (accepted first if it never was, for the client)."""
    return (
        [state.finished("cancelled")]
        if state.announced
        else [state.accepted, state.finished("cancelled")]
    )


class BatchedBackend(Backend):
    name = "batched"

    def __init__(self, pipeline: Any, context_length: int | None) -> None:
        super().__init__(pipeline.get_tokenizer(), pipeline.get_config(), context_length)
        self._pipe = pipeline
        self._active: dict[int, _Active] = {}
        # Constrained requests not yet in the pipeline (one joins per step, see step()).
        self._waiting: collections.deque[_Active] = collections.deque()
        # What the prefix cache holds, for each request's cached_tokens (None: not kept;
        # set by the worker after the load).
        self.ledger: PrefixLedger | None = None

    def submit(self, request: GenerationRequest) -> list[Event]:
        state = self._prepare(request)
        if isinstance(state, RequestRejected):
            return [state]
        if not state.probed:
            return self._hold(state)
        return self._admit(state)

    def _admit(self, state: _Active) -> list[Event]:
        if state.param is not None:
            self._waiting.append(state)  # accepted once its first step went through
            return []
        return self._add(state)

    def adopt(self, states: list[_Active]) -> list[Event]:
        """Take over the survivors of a pipeline whose step failed (see :meth:`_fail`)."""
        events: list[Event] = []
        for state in states:
            state.handle = None
            if not state.probed:
                self._hold(state)
            elif state.announced:
                events.extend(self._add(state))
            else:
                self._waiting.append(state)
        return events

    def _add(self, state: _Active) -> list[Event]:
        """Put ``state`` in the pipeline; its acceptance, or how it ended, as events."""
        rid = state.request_id
        prepared = state.prepared
        self._look_up(state)
        try:
            if prepared.prompt_text is not None:  # a vision-language model: text and images
                images = [to_tensor(image) for image in prepared.images]
                state.handle = self._pipe.add_request(
                    rid, prepared.prompt_text, images, prepared.config
                )
            else:
                state.handle = self._pipe.add_request(
                    rid, _tensor(prepared.prompt_ids), prepared.config
                )
        except Exception as exc:
            logger.exception("add_request failed")
            return [_ended(state, "internal", f"engine error: {short_error(exc)}")]
        self._active[rid] = state
        if state.announced or state.param is not None:
            return []
        state.announced = True
        return [state.accepted]

    def _look_up(self, state: _Active) -> None:
        """Count the prompt tokens GenAI will find cached: it restores them in
        ``add_request``, so this runs just before it (a VLM prompt's ids are GenAI's own:
        0). The count goes out with the acceptance and the end."""
        ledger = self.ledger
        prepared = state.prepared
        if ledger is None or prepared.prompt_text is not None:
            return
        state.found = ledger.cached(prepared.prompt_ids)
        state.cached_tokens = state.found.tokens
        state.accepted = dataclasses.replace(state.accepted, cached_tokens=state.cached_tokens)
        state.generated_ids = []

    def _remember(self, state: _Active, ended: bool) -> None:
        """Tell the ledger what the pipeline holds for ``state``: its prompt once its first
        token came; once it ended, the prompt and the reply as GenAI keys them."""
        if self.ledger is None or state.generated_ids is None:
            return
        if not state.generated_ids:
            return  # nothing came: its prompt may not be computed yet
        prompt = state.prepared.prompt_ids
        if not ended:
            self.ledger.hold(prompt)
            return
        # GenAI keys a sequence's blocks one token a decoding step, the last token's
        # (sampled, never fed back) not included: with speculation, the accepted guesses
        # beyond the first of a step are never found again (engine.worker.prefix_ledger).
        fed = max(state.decode_steps - 1, 0)
        ids = [*prompt, *state.generated_ids[:fed]]
        self.ledger.hold(ids, ended=True, prompt_tokens=len(prompt), found=state.found)

    def cancel(self, request_id: int) -> list[Event]:
        held = self._cancel_held(request_id)
        if held is not None:
            return held
        for waiting in self._waiting:
            if waiting.request_id == request_id:
                self._waiting.remove(waiting)
                return _cancelled(waiting)
        state = self._active.pop(request_id, None)
        if state is None:
            return []
        state.handle.cancel()
        self._remember(state, ended=True)  # its computed blocks stay in the cache
        return _cancelled(state)

    def warm_grammar(self) -> str | None:
        """Start the pipeline's grammar compiler with a one-token request; why not, or None.

        GenAI builds its XGrammar compiler (the tokenizer's whole vocabulary, sorted and
        decoded) on the first constrained request: 1.7-2.8 s for a 151k vocabulary on two
        cores, which an agent's first turn would wait for. The worker calls this once when
        it has been idle a while after a load, never while a request is in the pipeline.
        A failed step leaves the pipeline unusable: the caller reloads it then.
        """
        import openvino_genai as ov_genai

        if self.has_work():
            return "busy"
        structured = ov_genai.StructuredOutputConfig(grammar='root ::= "a"')
        return compile_once(self._pipe, structured)

    def has_work(self) -> bool:
        # Cancelled requests need one more step for the pipeline to free their blocks.
        return (
            bool(self._active)
            or bool(self._waiting)
            or bool(self._pipe.has_non_finished_requests())
        )

    def step(self, emit: Emit, poll: Callable[[], None]) -> None:
        import openvino_genai as ov_genai

        events: list[Event] = []
        newcomer = self._admit_one(events)
        try:
            self._pipe.step()
        except Exception as exc:
            logger.exception("pipeline step failed; the model will be reloaded")
            emit(events + self._fail(short_error(exc), newcomer))
            return
        if newcomer is not None and not newcomer.announced:
            newcomer.announced = True
            events.append(newcomer.accepted)
        for rid, state in list(self._active.items()):
            try:
                reason = self._read(state, events)
                status = state.handle.get_status()
            except Exception as exc:  # this request's output cannot be read: end it alone
                logger.exception("reading request %d failed", rid)
                with contextlib.suppress(Exception):
                    state.handle.cancel()
                events.append(state.finished("error", error=f"engine error: {short_error(exc)}"))
                del self._active[rid]
                continue
            if status == ov_genai.GenerationStatus.RUNNING and reason is None:
                continue
            if status == ov_genai.GenerationStatus.IGNORED:
                events.append(
                    state.finished(
                        "error", error="the request did not fit in the KV cache; raise kv_cache_gb"
                    )
                )
            else:
                if reason is None:
                    reason = "stop"
                events.extend(state.ending(reason, text=state.detok.finish()))
            if state.detok.stop.matched and status == ov_genai.GenerationStatus.RUNNING:
                state.handle.stop()
            self._remember(state, ended=True)
            del self._active[rid]
        if events:
            emit(events)

    def _admit_one(self, events: list[Event]) -> _Active | None:
        """Add the next waiting constrained request, if any: at most one joins per step."""
        while self._waiting:
            state = self._waiting.popleft()
            refused = self._add(state)
            if not refused:
                return state
            events.extend(refused)
        return None

    def _fail(self, error: str, newcomer: _Active | None) -> list[Event]:
        """End what a failed step took down; keep what can move to a reloaded pipeline.

        A step that fails right after a constrained request joined is blamed on that request
        (its grammar). Then the requests that had produced nothing yet are carried over
        (``survivors``); the ones already streaming end with an honest error. A failure no
        request can be blamed for ends every request, so nothing can fail twice in a row.
        """
        self.broken = True
        events: list[Event] = []
        blamed = newcomer is not None and not newcomer.announced
        if newcomer is not None and blamed:
            del self._active[newcomer.request_id]
            events.append(_grammar_rejected(newcomer.request_id, newcomer.param, error))
            cause = "another request's JSON schema failed in the engine"
        else:
            cause = f"engine error: {error}"
        for state in [*self._active.values(), *self._waiting]:
            if blamed and not state.started:
                self.survivors.append(state)
            else:
                events.append(_ended(state, "engine_restarting", f"{cause}; retry"))
        self._active.clear()
        self._waiting.clear()
        self.survivors.extend(self._take_held())  # never in the pipeline: nothing was lost
        return events

    def _read(self, state: _Active, events: list[Event]) -> FinishReason | None:
        """Read new tokens; return a finish reason once the request has ended."""
        reason = None
        count = 0
        while state.handle.can_read():
            outputs = state.handle.read()
            for output in outputs.values():
                ids = list(output.generated_ids)
                if ids:
                    count += len(ids)
                    if state.generated_ids is not None:
                        first = not state.generated_ids
                        state.generated_ids.extend(ids)
                        if first:  # its whole prompt is computed now
                            self._remember(state, ended=False)
                    state.on_tokens(len(ids))
                    logprobs = list(output.generated_log_probs) if state.want_logprobs else []
                    delta = state.delta(ids, logprobs)
                    if delta is not None:
                        events.append(delta)
                reason = _finish_reason(output.finish_reason) or reason
            if state.detok.stop.matched:
                reason = "stop"
                break
        state.on_step(count)
        return reason

    def fail(self, error: str) -> list[Event]:
        return self._fail(error, None)

    def close(self) -> list[Event]:
        events: list[Event] = []
        for state in self._take_held():
            events.extend(_cancelled(state))
        for rid in [*self._active, *(state.request_id for state in self._waiting)]:
            events.extend(self.cancel(rid))
        self._pipe = None
        return events


def _finish_reason(value: Any) -> FinishReason | None:
    import openvino_genai as ov_genai

    if value == ov_genai.GenerationFinishReason.LENGTH:
        return "length"
    if value == ov_genai.GenerationFinishReason.STOP:
        return "stop"
    return None


class SerialBackend(Backend):
    """One request at a time through ``LLMPipeline`` (NPU's static-shape pipeline), or a
    vision-language model's ``VLMPipeline`` (prompt text and images, NPU: one image)."""

    name = "serial"

    def __init__(self, pipeline: Any, context_length: int | None) -> None:
        super().__init__(pipeline.get_tokenizer(), pipeline.get_generation_config(), context_length)
        self._pipe = pipeline
        self._queue: collections.deque[_Active] = collections.deque()
        self._cancelled: set[int] = set()
        self._running: _Active | None = None

    def submit(self, request: GenerationRequest) -> list[Event]:
        state = self._prepare(request)
        if isinstance(state, RequestRejected):
            return [state]
        if not state.probed:
            return self._hold(state)
        return self._admit(state)

    def _admit(self, state: _Active) -> list[Event]:
        state.announced = True
        self._queue.append(state)
        return [state.accepted]

    def cancel(self, request_id: int) -> list[Event]:
        held = self._cancel_held(request_id)
        if held is not None:
            return held
        if self._running is not None and self._running.request_id == request_id:
            self._cancelled.add(request_id)  # the streamer stops it at the next token
            return []
        for state in list(self._queue):
            if state.request_id == request_id:
                self._queue.remove(state)
                return [state.finished("cancelled")]
        return []

    def has_work(self) -> bool:
        return bool(self._queue)

    def step(self, emit: Emit, poll: Callable[[], None]) -> None:
        import openvino_genai as ov_genai

        state = self._queue.popleft()
        prepared = state.prepared
        self._running = state
        backend = self

        class _Streamer(ov_genai.StreamerBase):  # type: ignore[misc]
            def write(self, token: Any) -> Any:
                ids = [int(t) for t in token] if isinstance(token, list | tuple) else [int(token)]
                state.on_tokens(len(ids))
                state.on_step(len(ids))  # one write per step (no speculation here)
                # The streamer gets no log-probabilities: serial requests report none.
                delta = state.delta(ids, [])
                if delta is not None:
                    emit([delta])
                poll()  # lets a Cancel (or new Submits) arrive mid-generation
                if state.request_id in backend._cancelled:
                    return ov_genai.StreamingStatus.CANCEL
                if state.detok.stop.matched:
                    return ov_genai.StreamingStatus.STOP
                return ov_genai.StreamingStatus.RUNNING

            def end(self) -> None:
                pass

        try:
            if prepared.prompt_text is not None:  # VLMPipeline: the prompt and its images
                images = [to_tensor(image) for image in prepared.images]
                self._pipe.generate(prepared.prompt_text, images, prepared.config, _Streamer())
            else:
                self._pipe.generate(_tensor(prepared.prompt_ids), prepared.config, _Streamer())
            events = self._ending(state)
        except PIPE_ERRORS:
            raise  # the server is gone: nothing left to tell
        except Exception as exc:  # LLMPipeline stays usable: only this request ends
            logger.exception("generate failed")
            events = [state.finished("error", error=f"engine error: {short_error(exc)}")]
        finally:
            self._running = None
            self._cancelled.discard(state.request_id)
        emit(events)

    def _ending(self, state: _Active) -> list[Event]:
        if state.request_id in self._cancelled:
            return [state.finished("cancelled")]
        reason: FinishReason = "stop"
        if not state.detok.stop.matched and state.completion_tokens >= state.prepared.max_tokens:
            reason = "length"
        return state.ending(reason, text=state.detok.finish())

    def fail(self, error: str) -> list[Event]:
        self.broken = True
        events: list[Event] = [s.finished("error", error=error) for s in self._queue]
        self._queue.clear()
        self.survivors.extend(self._take_held())
        return events

    def close(self) -> list[Event]:
        events: list[Event] = [state.finished("cancelled") for state in self._queue]
        for state in self._take_held():
            events.extend(_cancelled(state))
        self._queue.clear()
        self._pipe = None
        return events
