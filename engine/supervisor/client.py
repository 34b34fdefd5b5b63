"""EngineClient: the server process's handle on one engine worker process (one model).

It starts the worker, sends it commands and turns its events into per-request async
streams (:class:`engine.supervisor.streams.RequestStream`). The work is split by concern
into composed parts, one module each, that share one
:class:`~engine.supervisor.core.ClientState` (one lock; see :mod:`engine.supervisor.core`):
event routing (``routing.Router``), the worker process and its pipe
(``handle.WorkerHandle``), liveness and restarts (``watchdog.Watchdog``), idle unload
(``keepalive.KeepAlive``). This class builds them, wires them together and is the public
face: start/close, load, submit, embed, rerank, cancel here; the status, reading, revive and
keep-alive methods delegate to the part that owns them.
:class:`engine.supervisor.scheduler.Scheduler` holds one client per loaded model.

Threading: public methods are safe to call from any thread, except the two reading
hand-over methods (:meth:`read_on_loop`, :meth:`read_on_thread`), which run on the loop
concerned. Status listeners run on whichever thread changed the state (usually the one
reading the pipe) and must not block (the desktop shell re-emits them as Qt signals).
The lock rules are the state's: its one lock first, the send lock after it or alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Collection
from dataclasses import replace
from datetime import datetime
from typing import Any, Literal, TypeVar

from engine import cpu_tune
from engine.models import ModelSpec
from engine.settings import Settings
from engine.supervisor.core import ClientState
from engine.supervisor.handle import WorkerHandle
from engine.supervisor.keepalive import KeepAlive
from engine.supervisor.routing import Router
from engine.supervisor.states import (
    ERROR,
    LOADING,
    READY,
    RESTARTING,
    STARTING,
    STOPPED,
    CrashHistory,
    EngineState,
    EngineStatus,
    EngineUnavailable,
    RequestFailed,
)
from engine.supervisor.streams import RequestStream, unsendable, unsendable_text
from engine.supervisor.watchdog import Watchdog
from engine.worker.messages import (
    Cancel,
    Command,
    Embed,
    Embedded,
    Event,
    GenerationRequest,
    LoadModel,
    RequestRejected,
    Rerank,
    Reranked,
    Shutdown,
    Submit,
    Synthesize,
    Synthesized,
    Transcribe,
    Transcribed,
    UnloadModel,
)

__all__ = ["EngineClient"]

logger = logging.getLogger(__name__)

_Answer = TypeVar(
    "_Answer", Embedded, Reranked, Transcribed, Synthesized
)  # the one event a one-shot request ends with


class EngineClient:
    """Starts, feeds and supervises the engine worker process."""

    def __init__(self, settings: Settings, *, backend: str = "auto") -> None:
        self._settings = settings
        self._backend = backend
        self._machine_key: str | None = None  # CPU name | OpenVINO version, for the self-tune
        # The parts, each given the shared state and the parts it calls (core's docstring).
        self._state = ClientState(settings)
        self._router = Router(self._state)
        self._handle = WorkerHandle(self._state, self._router)
        self._watchdog = Watchdog(self._state, self._router, self._handle)
        self._handle.on_exit = self._watchdog.on_worker_exit  # the restart policy decides
        self._keepalive = KeepAlive(self._state, self._handle)

    # ---- status ------------------------------------------------------------------------

    def status(self) -> EngineStatus:
        """The engine's status now, with the in-flight request count (any thread)."""
        return self._state.snapshot()

    def add_listener(self, listener: Callable[[EngineStatus], None]) -> Callable[[], None]:
        """Call ``listener`` (on the reader thread) on every state change; returns an undo."""
        return self._state.add_listener(listener)

    def wait_for(self, states: Collection[EngineState], timeout: float) -> EngineStatus:
        """Block until the state is one of ``states`` (for the CLI and tests)."""
        return self._state.wait_for(states, timeout)

    # ---- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Spawn the worker process (returns at once; state goes to ``idle``)."""
        with self._state.lock:
            if self._state.process is not None:
                return
            self._state.closing = False
            self._handle.spawn()
            self._watchdog.start()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the worker; in-flight requests end with an error."""
        shared = self._state
        with shared.lock:
            shared.closing = True
            process, conn, reader = shared.process, shared.conn, self._handle.reader
            watchdog = self._watchdog.take_thread()
        self._watchdog.stop(watchdog, timeout)
        if process is None:
            with shared.lock:
                self._watchdog.unpause()
                self._router.fail_all("the engine was shut down")
                shared.update(state=STOPPED, worker_pid=None, model=None, device=None, backend=None)
            return
        with contextlib.suppress(OSError):
            shared.send(Shutdown())
        process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join(timeout)
        self._handle.detach_for_close(conn)
        if conn is not None:
            conn.close()
        if reader is not None and reader is not threading.current_thread():
            reader.join(timeout)
        with shared.lock:
            shared.process = shared.conn = self._handle.reader = None
            self._router.fail_all("the engine was shut down")
            shared.update(state=STOPPED, worker_pid=None, model=None, device=None, backend=None)

    def revive(self) -> bool:
        """Start a worker again if restarts were paused after repeated crashes (any thread).

        The watchdog thread does it on its own once the crash window has passed; a trusted
        /health, the next request and :meth:`load` do it sooner, so a crash budget only ever
        pauses restarts. Returns True when a new worker (and the last model) is on its way.
        """
        return self._watchdog.revive()

    def inherit(self, history: CrashHistory) -> None:
        """Carry a former client's crash history (restarts, last error) of the same model
        over to this one, before it starts: a reload must not wipe what a crash loop left
        for /health to tell (any thread; the scheduler calls it)."""
        with self._state.lock:
            self._state.status = replace(
                self._state.status, restarts=history.restarts, last_error=history.last_error
            )

    # ---- reading the worker's pipe -----------------------------------------------------

    @property
    def reads_on(self) -> Literal["loop", "thread"]:
        """Who reads the worker pipe now: ``"loop"``, or ``"thread"`` (also mid-hand-over)."""
        return self._handle.reads_on

    def read_on_loop(self) -> None:
        """Read worker events on the running event loop from now on (call on that loop).

        A server calls this when it starts so tokens reach its streams without a thread
        hop. The reader thread finishes what it has read and stops at a :class:`Pong`, so no
        event is lost or reordered. Does nothing where the loop cannot watch the pipe.
        """
        self._handle.read_on_loop()

    def read_on_thread(self) -> None:
        """Give reading back to a reader thread (call on the reading loop before it stops)."""
        self._handle.read_on_thread()

    # ---- keep-alive and eviction -------------------------------------------------------

    def close_if_idle(self) -> bool:
        """Refuse new requests from now on if none is in flight (then :meth:`close` it);
        False while a request runs. Atomic with :meth:`submit`: the scheduler evicts a model
        this way and so never cancels a running request. Any thread."""
        return self._keepalive.close_if_idle()

    def reopen(self) -> None:
        """Take requests again after :meth:`close_if_idle` when the close did not happen
        (the scheduler's eviction plan fell through). Any thread."""
        self._keepalive.reopen()

    def release(self, reason: str = "unloaded") -> bool:
        """Unload the model by ending its worker process, which returns all of its memory.

        An unload inside the worker frees only ~8-30 MB (docs/benchmarks.md, "Model
        lifecycle"): OpenVINO and the allocator keep the rest. Refused (returns False) while
        a request is in flight: a running request is never cancelled to free memory. A fresh
        worker with no model is started at once (state ``idle``); the next request for the
        model loads it again. Any thread.
        """
        return self._keepalive.release(reason)

    def set_keep_alive(self, seconds: float) -> None:
        """How long the loaded model stays loaded once idle, from now on (any thread).

        Ollama's ``keep_alive`` / LM Studio's ``ttl`` of the latest request: seconds,
        ``math.inf`` for forever, 0 to unload as soon as no request is in flight. Loading
        another model resets it to ``Settings.idle_unload_seconds``.
        """
        self._keepalive.set_keep_alive(seconds)

    def expires_at(self) -> datetime | None:
        """When the loaded model will be unloaded if no request comes (UTC), or None when
        nothing is loaded or it stays loaded forever. While requests run: now + keep_alive."""
        return self._keepalive.expires_at()

    def watch_idle(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` (lock held: it must not block) whenever the idle deadline may have
        moved; the scheduler's owner loop then asks :meth:`idle_due` again."""
        with self._state.lock:
            self._state.idle_watch = wake

    def idle_due(self) -> float | None:
        """When the idle model is due to be unloaded (monotonic), or None (busy, not
        loaded, kept forever). Any thread."""
        return self._keepalive.idle_due()

    def unload_if_idle_due(self, now: float) -> bool:
        """Unload the model (ending its worker, starting a fresh one) when its keep-alive
        ran out by ``now``; True when it did. The scheduler's owner loop calls it: it times
        every idle unload. Any thread."""
        return self._keepalive.retire_if_due(now)

    # ---- models ------------------------------------------------------------------------

    def load(self, spec: ModelSpec, device: str | None = None) -> None:
        """Load (or switch to) ``spec`` on ``device``; returns at once, state -> ``loading``."""
        device = device or self._settings.device
        properties = self._settings.device_properties(device)
        tuned = self._cached_tune() if device.startswith("CPU") else None
        if device.startswith("CPU"):
            properties = {**properties, **self._tuned_properties(tuned)}
            if spec.prefs.kv_cache_precision is not None:  # the model's own wins
                properties["KV_CACHE_PRECISION"] = spec.prefs.kv_cache_precision
        command = LoadModel(
            spec=spec,
            device=device,
            properties=properties,
            kv_cache_gb=self._settings.kv_cache_gb,
            compile_cache_dir=str(self._settings.paths.compile_cache_dir),
            backend=self._backend,
            stream_interval=self._settings.stream_interval_ms / 1000,
            prompt_lookup=self._prompt_lookup(device, tuned),
            draft_path=str(spec.draft_path)
            if spec.draft_path is not None and self._settings.draft_models
            else None,
            speculative_tokens=self._settings.speculative_tokens,
        )
        with self._state.lock:
            self._watchdog.revive_locked()  # a model switch is a fresh start after crashes, too
            self._state.wanted = command
            self._watchdog.fresh_start()
            self._keepalive.reset()
            self._state.update(
                state=LOADING,
                model=spec,
                device=device,
                message=f"loading {spec.id}",
                unloaded=None,
                cpu_properties=dict(properties) if device.startswith("CPU") else None,
            )
        self._state.send(command)

    def cpu_properties(self) -> dict[str, Any]:
        """CPU properties to load with: explicit settings over the cached self-tune choice.

        Cheap (one small file read) unless the machine key is not known yet, which costs one
        OpenVINO core query, once.
        """
        return self._tuned_properties(self._cached_tune())

    def _cached_tune(self) -> cpu_tune.TuneResult | None:
        """This machine's cached self-tune, or None (self-tune off, or not tuned yet)."""
        cpu, cache_dir = self._settings.cpu, self._settings.paths.cache_dir
        if not cpu.self_tune or not (cache_dir / cpu_tune.CACHE_FILE).exists():
            return None
        if self._machine_key is None:
            self._machine_key = cpu_tune.machine_key()
        return cpu_tune.cached_tune(cache_dir, self._machine_key)

    def _tuned_properties(self, tuned: cpu_tune.TuneResult | None) -> dict[str, Any]:
        cpu = self._settings.cpu
        return cpu_tune.effective_properties(cpu, tuned.properties if tuned else None)

    def _prompt_lookup(self, device: str, tuned: cpu_tune.TuneResult | None) -> bool:
        """Whether a load on ``device`` uses prompt lookup: the setting when set; ``auto``
        asks the CPU self-tune's measure of its guesses' cost (``tuned``; CPU loads only)."""
        setting = self._settings.prompt_lookup
        cost = tuned.lookup_cost if tuned is not None and device.startswith("CPU") else None
        on = cpu_tune.lookup_pays(setting, cost)
        if setting is None and not on:
            logger.info(
                "prompt lookup off on this CPU (auto): a step with guesses costs %.2f plain "
                "steps here; SIDELIGHT_PROMPT_LOOKUP=1 turns it on",
                cost,
            )
        return on

    def unload(self) -> None:
        """Unload the model inside the worker (the worker and OpenVINO stay: see release())."""
        with self._state.lock:
            self._state.wanted = None
        self._state.send(UnloadModel())

    # ---- requests ----------------------------------------------------------------------

    def submit(self, request: GenerationRequest) -> RequestStream:
        """Queue a generation (its ``request_id`` is assigned here); iterate the returned
        stream on the calling loop.

        Raises:
            EngineUnavailable: no model is ready (the message says why and for how long).
        """
        loop = asyncio.get_running_loop()
        with self._state.lock:
            self._check_ready()
            request_id = next(self._state.ids)
            stream = RequestStream(self, request_id, loop)
            self._state.streams[request_id] = stream
            if request.keep_alive is not None:  # applies once this request has ended
                self._keepalive.keep_after_request(request.keep_alive)
        request = replace(request, request_id=request_id, keep_alive=None)
        try:
            self._state.send(Submit(request))
        except OSError as exc:
            self._router.forget(request_id)
            raise EngineUnavailable("the engine is restarting", RESTARTING, 2) from exc
        except Exception as exc:  # it did not pickle (nothing was sent): refuse it alone
            self._router.forget(request_id)
            param, message = unsendable(request, exc)
            stream._put_all([RequestRejected(request_id, "invalid_request", message, param)])
        return stream

    async def embed(
        self, spec: ModelSpec, texts: list[str], device: str | None = None, truncate: bool = False
    ) -> Embedded:
        """Embed ``texts`` with the embedding model ``spec`` (loaded beside the chat model).

        Raises:
            EngineUnavailable: the worker is not running.
            RequestFailed: the model could not be loaded or run.
        """
        device = device or self._settings.device
        return await self._one_shot(
            lambda rid: Embed(rid, spec, device, tuple(texts), truncate), "input", Embedded
        )

    async def rerank(
        self, spec: ModelSpec, query: str, documents: list[str], device: str | None = None
    ) -> Reranked:
        """Score ``documents`` against ``query`` with the reranker ``spec`` (loaded beside
        the chat model); the scores come in the documents' order.

        Raises:
            EngineUnavailable: the worker is not running.
            RequestFailed: a pair is too long for the model (``invalid_request`` naming
                ``documents.N`` or ``query``), or the model could not be loaded or run.
        """
        device = device or self._settings.device
        return await self._one_shot(
            lambda rid: Rerank(rid, spec, device, query, tuple(documents)), "documents", Reranked
        )

    async def transcribe(self, command: Callable[[int], Transcribe]) -> Transcribed:
        """Transcribe one window with the recogniser the command names (``command`` builds it
        for a request id).

        Raises:
            EngineUnavailable: the worker is not running.
            RequestFailed: a field the model cannot honour (``invalid_request`` naming it),
                or the model could not be loaded or run.
        """
        return await self._one_shot(command, "file", Transcribed)

    async def synthesize(self, command: Callable[[int], Synthesize]) -> Synthesized:
        """Speak one piece of text with the model the command names (``command`` builds it
        for a request id).

        Raises:
            EngineUnavailable: the worker is not running.
            RequestFailed: a field the model cannot honour (``invalid_request`` naming it),
                or the model could not be loaded or run.
        """
        return await self._one_shot(command, "input", Synthesized)

    async def _one_shot(
        self, command: Callable[[int], Command], param: str, answer: type[_Answer]
    ) -> _Answer:
        """Send the command built for a new request id and wait for its one ``answer``.

        The worker may run it beside a chat model (embeddings, reranking): it needs a
        running worker, not a loaded model. A caller that gives up (a client disconnected)
        cancels it in the worker.
        """
        loop = asyncio.get_running_loop()
        shared = self._state
        with shared.lock:
            self._watchdog.revive_locked()
            if shared.closing:  # unloaded or evicted (close_if_idle): the scheduler retries
                raise EngineUnavailable("the model was unloaded; retry", STOPPED, 1)
            if shared.process is None or shared.status.state == STOPPED:
                raise EngineUnavailable("the engine is not running", shared.status.state, None)
            request_id = next(shared.ids)
            stream = RequestStream(self, request_id, loop)
            shared.streams[request_id] = stream
        try:
            self._state.send(command(request_id))
        except OSError as exc:
            self._router.forget(request_id)
            raise EngineUnavailable("the engine is restarting", RESTARTING, 2) from exc
        except Exception as exc:  # it did not pickle (nothing was sent)
            self._router.forget(request_id)
            raise RequestFailed("invalid_request", unsendable_text(exc, param), param) from exc
        event: Event | None = None
        try:
            event = await stream.next_event()
        finally:
            self._router.forget(request_id)
            if event is None:  # the caller gave up (a client disconnected): stop the batch
                with contextlib.suppress(OSError):
                    self._state.send(Cancel(request_id))
        if isinstance(event, answer):
            return event
        if isinstance(event, RequestRejected):
            raise RequestFailed(event.code, event.message, event.param)
        raise RequestFailed("internal", f"unexpected engine event {event!r}")

    def cancel(self, request_id: int) -> None:
        """Stop a request in the worker (any thread; its stream calls this too)."""
        with self._state.lock:
            if request_id not in self._state.streams:
                return
        # If the worker is gone, its death handler ends the stream.
        with contextlib.suppress(OSError):
            self._state.send(Cancel(request_id))

    def _check_ready(self) -> None:
        """Raise unless a submitted generation can run now (lock held)."""
        if self._state.closing:
            raise EngineUnavailable("the model was unloaded; retry", STOPPED, 1)
        if self._watchdog.revive_locked():
            raise EngineUnavailable(
                "the engine is restarting after repeated crashes; retry shortly", RESTARTING, 2
            )
        status = self._state.status
        state = status.state
        if state == READY:
            return
        if state in (LOADING, STARTING, RESTARTING):
            model = status.model.id if status.model else "the model"
            raise EngineUnavailable(f"{model} is {state}; retry shortly", state, 2)
        if state == ERROR:
            raise EngineUnavailable(f"the engine failed: {status.message}", state, None)
        raise EngineUnavailable("no model is loaded", state, None)
