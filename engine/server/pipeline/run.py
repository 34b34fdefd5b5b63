"""The one generation path: resolve the model, plan, submit, parse, count, fail typed.

Every dialect (and the desktop chat) calls :meth:`Pipeline.start` or
:meth:`Pipeline.collect` with a :class:`GenerateRequest` and renders what comes back.

Threading: runs on one event loop per request (the server's, or the desktop's asyncio
thread); only :meth:`Generation.cancel` may be called from another thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncGenerator

from engine.echo import clip
from engine.model_prefs import ModelPrefs
from engine.models import ModelSpec
from engine.parsing import ContentDelta, ReasoningText, ToolCall, ToolCallDelta, ToolCallEnd
from engine.server.errors import APIError
from engine.server.images import decode_images
from engine.server.model_info import ModelDirectory
from engine.server.monitor import GenerationTracker, RequestMonitor
from engine.server.pipeline.engine import (
    EngineLike,
    EngineStream,
    RemoteCatalogLike,
    RemoteStream,
    RemoteTarget,
    engine_failed,
    request_failed,
    unavailable,
)
from engine.server.pipeline.events import (
    Done,
    FinishReason,
    Logprobs,
    PipelineEvent,
    Reply,
    Started,
    Timings,
    Usage,
)
from engine.server.pipeline.model_defaults import with_model_defaults
from engine.server.pipeline.models import ModelResolver
from engine.server.pipeline.plan import Plan, ReplyReader, engine_request, plan_request
from engine.server.pipeline.prompt_size import check_prompt_size
from engine.server.pipeline.request import GenerateRequest
from engine.store import ModelStore
from engine.supervisor.states import STOPPED, EngineUnavailable, RequestFailed
from engine.worker.messages import Finished, ImageInput, TextDelta, TokenLogprob

logger = logging.getLogger(__name__)

_CLOSING: set[asyncio.Task[None]] = set()  # connections to remotes being let go of

ENGINE_CANCELLED = "the engine cancelled the request (the model was switched or unloaded); retry it"


class Pipeline:
    """Turns a :class:`GenerateRequest` into reply events, whatever dialect asked.

    Every generation is recorded here, once for all dialects, in ``monitor`` (metrics
    and the request log).

    Args:
        engine: the engine (the real client, or a scripted fake in unit tests).
        store: the model store requests may name models from (``None``: the loaded model
            only).
        monitor: where generations are recorded (default: a monitor of its own).
        remotes: the remote servers whose models are ``MODEL@NAME`` (None: none); their
            requests take the same path here, to an OpenAI request instead of a worker.
    """

    def __init__(
        self,
        engine: EngineLike,
        store: ModelStore | None = None,
        monitor: RequestMonitor | None = None,
        remotes: RemoteCatalogLike | None = None,
    ) -> None:
        self.engine = engine
        self.store = store
        self.monitor = monitor if monitor is not None else RequestMonitor(engine.status)
        self.remotes = remotes
        # One record of the models seen, shared by every dialect's model listing.
        self.models = ModelDirectory(engine, store, remotes)
        self.resolver = ModelResolver(engine, store, self.models, remotes)

    async def resolve_model(self, name: str) -> ModelSpec:
        """The loaded spec for ``name``, loading it when needed (see
        :meth:`ModelResolver.chat_model`); a dialect calls it alone to warm a model up."""
        return await self.resolver.chat_model(name)

    async def start(self, request: GenerateRequest) -> Generation:
        """Resolve the model, submit, and wait until the engine accepts the request.

        Raises:
            APIError: every refusal, before anything is sent to the client: unknown model
                (404), prompt over the context or a bad field (400), no fill-in-the-middle
                tokens (400), a model still loading or an engine restarting (503), ...
        """
        tracker = self.monitor.track(request.dialect, request.model)
        try:
            return await self._start(request, tracker)
        except APIError as exc:
            tracker.failed(exc.status, exc.message)
            raise
        except Exception:
            tracker.failed(500, "internal error while starting the generation")
            raise
        except BaseException:  # cancelled while waiting (the client went away)
            tracker.cancelled()
            raise

    async def _start(self, request: GenerateRequest, tracker: GenerationTracker) -> Generation:
        try:
            return await self._start_once(request, tracker)
        except _UnloadedMeanwhile:
            # The idle timer ended the model's worker between its lookup and the submit
            # (another thread): look it up again, which loads it (once).
            return await self._start_once(request, tracker, retry=False)

    async def _start_once(
        self, request: GenerateRequest, tracker: GenerationTracker, *, retry: bool = True
    ) -> Generation:
        target = self.resolver.remote(request.model)
        if target is not None:
            if request.images:  # never dropped: refused until remotes carry them
                raise APIError(
                    400,
                    f"'{clip(request.model)}' is a model on a remote server: Sidelight does "
                    "not pass images on to remote servers yet",
                    param=request.images[0].field,
                    code="model_not_vision",
                )
            return await _start_remote(request, target, tracker)
        if request.images:  # a model that cannot see is refused before it is loaded
            info = await self.models.look_up(request.model)
            if info is not None and info.task != "vision":
                raise await self._cannot_see(info.id, request)
        spec, engine = await self.resolver.chat_engine(request.model)
        tracker.resolved(spec.id)
        request = with_model_defaults(request, await self._prefs(spec))
        status = engine.status()
        if request.suffix is not None and status.fim_tokens is None:
            raise APIError(
                400,
                f"The model '{spec.id}' does not support fill-in-the-middle: it has no FIM "
                "tokens. Use a code model that has them (e.g. Qwen2.5-Coder) or drop 'suffix'.",
                param="suffix",
                code="fim_not_supported",
            )
        check_prompt_size(request, status.context_length)
        plan = plan_request(request, status.chat_template)
        images = await self._images(request, spec)
        try:
            stream = engine.submit(engine_request(request, plan, images))
        except EngineUnavailable as exc:
            # The model left between its lookup and the submit (idle unload, evicted):
            # look it up again, which loads it (once).
            if retry and (exc.state == STOPPED or engine.status().unloaded is not None):
                raise _UnloadedMeanwhile from exc
            raise unavailable(exc) from exc
        tracker.submitted()
        try:
            accepted = await stream.start()
        except RequestFailed as exc:
            raise request_failed(exc, field_names=request.field_names) from exc
        except BaseException:  # cancelled while waiting (the client went away)
            stream.cancel()
            raise
        tracker.accepted(accepted.prompt_tokens, accepted.cached_tokens)
        logger.debug(
            "%s request on %s: %d prompt tokens (%d cached)",
            request.dialect,
            spec.id,
            accepted.prompt_tokens,
            accepted.cached_tokens,
        )
        started = Started(spec.id, accepted.prompt_tokens, accepted.cached_tokens)
        return Generation(
            stream, started, plan, accepted.opens_reasoning, request.logprobs, tracker
        )

    async def _prefs(self, spec: ModelSpec) -> ModelPrefs:
        """The model's own settings as they are now (the store's file, read off the loop),
        else the ones it was loaded with."""
        if self.store is None or spec.is_demo:
            return spec.prefs
        return await asyncio.to_thread(self.store.request_prefs, spec.id)

    async def _images(self, request: GenerateRequest, spec: ModelSpec) -> tuple[ImageInput, ...]:
        """The request's images decoded and checked (on a thread), for a model that sees.

        Raises:
            APIError: 400 when the model cannot see images (naming the models that can), or
                naming the first bad image's field.
        """
        if not request.images:
            return ()
        if spec.task != "vision":
            raise await self._cannot_see(spec.id, request)
        return await asyncio.to_thread(decode_images, request.images)

    async def _cannot_see(self, model_id: str, request: GenerateRequest) -> APIError:
        """The 400 for images sent to a text-only model, naming the models that can see."""
        infos = await self.models.all()
        seeing = sorted({info.id for info in infos if info.task == "vision"})
        others = (
            f"models that can: {', '.join(seeing)}"
            if seeing
            else "no installed model can (add a vision-language model, e.g. an OpenVINO Qwen2.5-VL)"
        )
        return APIError(
            400,
            f"The model '{model_id}' cannot see images: it reads text only; {others}",
            param=request.images[0].field,
            code="model_not_vision",
        )

    async def count(self, request: GenerateRequest) -> int:
        """The prompt's tokens as the model counts them: templated and tokenized, nothing
        generated (``count_only``). The count is a request of its own in the monitor, and
        it ends there as finished (or failed), never left running: the engine's answer
        (accepted, then finished at once) is read to its end.

        Raises:
            APIError: as :meth:`start`.
        """
        counting = dataclasses.replace(request, count_only=True, max_tokens=1)
        generation = await self.start(counting)
        done: Done | None = None
        try:
            async for event in generation:
                # A count_only request finishes at once: Done, with nothing generated (a
                # remote model generates one token; its Done has the remote's count).
                done = event if isinstance(event, Done) else done
        finally:
            generation.close()
        counted = generation.started.prompt_tokens
        return counted or (done.usage.prompt_tokens if done is not None else 0)

    async def collect(self, request: GenerateRequest) -> Reply:
        """The whole answer, parsed.

        Raises:
            APIError: as :meth:`start`, and 503 ``engine_error`` when generation fails.
        """
        generation = await self.start(request)
        content: list[str] = []
        reasoning: list[str] = []
        calls: list[ToolCall] = []
        logprobs: list[tuple[str, float]] = []
        async for event in generation:
            if isinstance(event, Done):
                return Reply(
                    generation.started,
                    event,
                    "".join(content),
                    "".join(reasoning),
                    calls,
                    logprobs,
                )
            if isinstance(event, Logprobs):
                logprobs.extend(event.items)
            elif isinstance(event, ReasoningText):
                reasoning.append(event.text)
            elif isinstance(event, ContentDelta):
                content.append(event.text)
            elif isinstance(event, ToolCallEnd):
                calls.append(event.call)
        raise AssertionError("a generation always ends with Done")  # pragma: no cover


class Generation:
    """One accepted request: :attr:`started`, then its events by async iteration.

    Yields reply events (reasoning, content, tool calls), :class:`Logprobs` when requested
    (one before each engine step's events, empty when the step had none), and a final
    :class:`Done`. An engine failure mid-stream raises :class:`APIError` (503,
    ``engine_error``). Leaving the iteration early cancels the request in the engine.
    Iterate once. How it ended is reported to ``tracker`` (the request monitor): a
    consumer that may leave without iterating (or stop before the end) calls :meth:`close`,
    so the request never stays "running" in the monitor.
    """

    def __init__(
        self,
        stream: EngineStream,
        started: Started,
        plan: Plan,
        opens_reasoning: bool,
        logprobs: bool,
        tracker: GenerationTracker,
    ) -> None:
        self.started = started
        self._stream = stream
        self._cancel_stream = stream.cancel  # what cancel() and close() stop
        self._tracker = tracker
        self._reader = ReplyReader(plan, opens_reasoning)
        self._logprobs = logprobs
        self._cancel_requested = False
        self._done = False
        self.tokens = 0  # tokens generated so far (the desktop's live rate reads it)

    def cancel(self) -> None:
        """Stop generating (any thread). A consumer that reads on gets what was generated,
        then ``Done`` with ``finish_reason="cancelled"``."""
        self._cancel_requested = True
        self._cancel_stream()

    def close(self) -> None:
        """End the request if it has not ended: cancelled in the engine and in the monitor
        (a generation never iterated, or left early). Harmless after the end.

        Threading: the loop running the generation (the tracker is that loop's)."""
        if not self._done:
            self._done = True
            self._cancel_stream()
            self._tracker.cancelled()  # the first end counts: after Done or a failure, nothing

    def __aiter__(self) -> AsyncGenerator[PipelineEvent, None]:
        return self._events()

    async def _events(self) -> AsyncGenerator[PipelineEvent, None]:
        try:
            async for event in self._stream:
                if self._logprobs:
                    yield Logprobs(_items(event.logprobs))
                if isinstance(event, TextDelta):
                    self.tokens += event.tokens
                    self._tracker.generated(self.tokens)
                    for parsed in self._reader.feed(event.text):
                        yield parsed
                    continue
                # The reply is read to its end first: syntaxes that complete a call only
                # at the end (Mistral's [TOOL_CALLS], a call left unclosed) must count as
                # called when the finish reason is chosen (reading is pure: on a failure the
                # tail is simply not sent).
                tail = self._reader.finish(event.text)
                reason = self._finish_reason(event)
                for parsed in tail:
                    yield parsed
                self._done = True
                done = _done(event, reason)
                self._tracker.finished(done)
                yield done
                return
            raise APIError(500, "the engine ended the request without a result")
        except APIError as exc:
            self._tracker.failed(exc.status, exc.message)
            raise
        finally:
            if not self._done:
                self._stream.cancel()
                self._tracker.cancelled()  # (after a failure: already ended, nothing to do)

    def _finish_reason(self, event: Finished) -> FinishReason:
        if event.finish_reason == "error":
            raise engine_failed(event.error)
        if event.finish_reason == "cancelled":
            if not self._cancel_requested:
                raise engine_failed(ENGINE_CANCELLED)
            return "cancelled"
        if event.finish_reason == "stop" and self._reader.called:
            return "tool_calls"
        return event.finish_reason


class RemoteGeneration(Generation):
    """A generation another server runs (``MODEL@NAME``): its events arrive parsed, so no
    reply parser runs here; the rest is :class:`Generation`'s (cancel, close, the monitor,
    a failure mid-stream raised as the remote's :class:`APIError`). ``started`` names the
    local id with a prompt size of 0: the remote counts it, in :class:`Done`'s usage.
    ``count_only``: only the :class:`Done` is yielded.
    """

    def __init__(
        self, remote: RemoteStream, started: Started, tracker: GenerationTracker, count_only: bool
    ) -> None:
        self.started = started
        self._cancel_stream = remote.cancel
        self._remote = remote
        self._tracker = tracker
        self._count_only = count_only
        self._cancel_requested = False
        self._done = False
        self._iterated = False
        self.tokens = 0

    def close(self) -> None:
        """As :meth:`Generation.close`; a generation never iterated also lets go of its
        connection to the remote (on this loop, soon)."""
        ended = self._done
        super().close()
        if not ended and not self._iterated:
            task = asyncio.get_running_loop().create_task(self._remote.aclose())
            _CLOSING.add(task)
            task.add_done_callback(_CLOSING.discard)

    async def _events(self) -> AsyncGenerator[PipelineEvent, None]:
        self._iterated = True
        try:
            async for event in self._remote:
                if isinstance(event, Done):
                    self._done = True
                    await self._remote.aclose()  # before Done: a consumer may stop there
                    done = event
                    if self._cancel_requested:
                        done = dataclasses.replace(event, finish_reason="cancelled")
                    self._tracker.finished(done)
                    yield done
                    return
                if self._count_only:
                    continue
                if isinstance(event, ContentDelta | ReasoningText | ToolCallDelta):
                    self.tokens += 1  # a piece, the remote's token count comes with Done
                    self._tracker.generated(self.tokens)
                yield event
            raise APIError(502, "the remote ended the request without a result")
        except APIError as exc:
            self._tracker.failed(exc.status, exc.message)
            raise
        finally:
            if not self._done:
                self._remote.cancel()
                self._tracker.cancelled()
            await self._remote.aclose()


async def _start_remote(
    request: GenerateRequest, target: RemoteTarget, tracker: GenerationTracker
) -> Generation:
    """Send ``request`` to a remote server; the same monitor record as a local request."""
    spec = target.spec
    tracker.resolved(spec.id)
    tracker.submitted()
    stream = await target.start(request)  # APIError naming the remote
    tracker.accepted(0)
    logger.debug("%s request on %s (remote)", request.dialect, spec.id)
    return RemoteGeneration(stream, Started(spec.id, 0), tracker, request.count_only)


def _items(logprobs: tuple[TokenLogprob, ...]) -> tuple[tuple[str, float], ...]:
    return tuple((t.token, t.logprob) for t in logprobs)


def _done(event: Finished, reason: FinishReason) -> Done:
    return Done(
        reason,
        Usage(event.prompt_tokens, event.completion_tokens, event.cached_tokens),
        Timings(
            event.ttft_seconds,
            event.decode_seconds,
            event.decode_steps,
            event.accepted_tokens,
            event.speculation,
        ),
        event.stop_sequence,
    )


class _UnloadedMeanwhile(Exception):
    """The model was unloaded on purpose between resolving it and submitting to it."""
