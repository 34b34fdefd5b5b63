"""EngineClient: the server process's handle on one engine worker process (one model).

It starts the worker, sends it commands and turns its events into per-request async
streams (:class:`engine.supervisor.streams.RequestStream`). The work is split by concern
into layers, one module each (see :mod:`engine.supervisor.core`): the worker process and
its pipe (``handle``), event routing (``routing``), liveness and restarts (``watchdog``),
idle unload (``keepalive``). This module is the public face: start/close, load, submit,
embed, rerank, cancel. :class:`engine.supervisor.scheduler.Scheduler` holds one client per
loaded model.

Threading: public methods are safe to call from any thread, except the two reading
hand-over methods (:meth:`read_on_loop`, :meth:`read_on_thread`), which run on the loop
concerned. Status listeners run on whichever thread changed the state (usually the one
reading the pipe) and must not block (the desktop shell re-emits them as Qt signals).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from engine import cpu_tune
from engine.models import ModelSpec
from engine.resources import demo_model_path
from engine.supervisor.core import keep_alive_default
from engine.supervisor.keepalive import KeepAlive
from engine.supervisor.states import (
    ERROR,
    IDLE,
    LOADING,
    READY,
    RESTARTING,
    STARTING,
    STOPPED,
    EngineUnavailable,
    LoadedModel,
    RequestFailed,
)
from engine.supervisor.streams import RequestStream, unsendable, unsendable_text
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
    UnloadModel,
)

__all__ = ["EngineClient"]

logger = logging.getLogger(__name__)

_Answer = TypeVar("_Answer", Embedded, Reranked)  # the one event a one-shot request ends with


class EngineClient(KeepAlive):
    """Starts, feeds and supervises the engine worker process."""

    # ---- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Spawn the worker process (returns at once; state goes to ``idle``)."""
        with self._lock:
            if self._process is not None:
                return
            self._closing = False
            self._spawn()
            self._start_idle_timer()
            self._start_watchdog()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the worker; in-flight requests end with an error."""
        with self._lock:
            self._closing = True
            process, conn, reader = self._process, self._conn, self._reader
            watchdog, self._watchdog = self._watchdog, None
        self._watch_stop.set()
        if watchdog is not None and watchdog is not threading.current_thread():
            watchdog.join(timeout)
        if process is None:
            with self._lock:
                self._paused = False
                self._fail_all("the engine was shut down")
                self._set(state=STOPPED, worker_pid=None, model=None, device=None, backend=None)
            return
        with contextlib.suppress(OSError):
            self._send(Shutdown())
        process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join(timeout)
        self._detach_for_close(conn)
        if conn is not None:
            conn.close()
        if reader is not None and reader is not threading.current_thread():
            reader.join(timeout)
        with self._lock:
            self._process = self._conn = self._reader = None
            self._fail_all("the engine was shut down")
            self._set(state=STOPPED, worker_pid=None, model=None, device=None, backend=None)

    # ---- models ------------------------------------------------------------------------

    def load(self, spec: ModelSpec, device: str | None = None) -> None:
        """Load (or switch to) ``spec`` on ``device``; returns at once, state -> ``loading``."""
        device = device or self._settings.device
        properties = self._settings.device_properties(device)
        tuned = self._cached_tune() if device.startswith("CPU") else None
        if device.startswith("CPU"):
            properties = {**properties, **self._tuned_properties(tuned)}
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
        with self._lock:
            self._revive()  # a model switch is a fresh start after crashes, too
            self._wanted = command
            self._crashes.clear()
            self._keep_alive = keep_alive_default(self._settings)
            self._idle_since = None
            self._set(
                state=LOADING,
                model=spec,
                device=device,
                message=f"loading {spec.id}",
                unloaded=None,
                cpu_properties=dict(properties) if device.startswith("CPU") else None,
            )
        self._send(command)

    def expect_load(self, spec: ModelSpec, device: str, why: str) -> None:
        """Say ``spec`` is on its way before :meth:`load` is called (state -> ``loading``).

        For start-up work that must come first (the CPU self-tune): requests naming
        ``spec`` meanwhile wait for it or get 503 + Retry-After, never 404 (the server's
        resolver finds it in the status). Sends nothing to the worker.
        """
        with self._lock:
            self._set(state=LOADING, model=spec, device=device, message=why)

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

    def tune_cpu(self, model_dir: Path | None = None) -> None:
        """Run the CPU self-tune unless this machine's choice is cached (blocks seconds).

        Threading: call it from a background thread before the first CPU load, so no
        request waits for it and the model load does not skew its measurements.
        """
        cpu, cache_dir = self._settings.cpu, self._settings.paths.cache_dir
        if not cpu.self_tune:
            return
        key = self._machine_key or cpu_tune.machine_key()
        self._machine_key = key
        try:
            cpu_tune.tune_unless_cached(cpu, cache_dir, model_dir or demo_model_path(), key=key)
        except Exception:  # a failed tune leaves OpenVINO's defaults, never the server down
            logger.exception("CPU self-tune failed; keeping the configured CPU properties")

    def acquire(
        self, spec: ModelSpec, device: str | None, timeout: float | None = None
    ) -> EngineClient:
        """This client serving ``spec``: switches to it when another model is loaded and
        waits (bounded) for the load; blocks, so call it on a worker thread.

        A lone client holds one model, so a switch ends the old model's in-flight replies;
        :class:`engine.supervisor.scheduler.Scheduler` loads each model in a worker of its
        own instead (what the server and the desktop use).
        """
        status = self.status()
        if status.model is None or status.model.id != spec.id or status.state == IDLE:
            self.load(spec, device or status.device)
        wait = self._settings.load_wait_seconds if timeout is None else timeout
        self.wait_for({READY, ERROR}, wait)
        return self

    def running(self, model_id: str) -> EngineClient | None:
        """This client when ``model_id`` (any case, spaces trimmed) is loaded and ready."""
        status = self.status()
        wanted = model_id.strip().lower()
        if status.state == READY and status.model and status.model.id.lower() == wanted:
            return self
        return None

    def loaded(self) -> list[LoadedModel]:
        """The model this worker holds (none, or one)."""
        status = self.status()
        if status.model is None:
            return []
        return [
            LoadedModel(
                id=status.model.id,
                task=status.model.task,
                state=status.state,
                device=status.device,
                memory_mb=None,
                memory_estimated=True,
                context_length=status.context_length,
                expires_at=self.expires_at(),
                active_requests=status.active_requests,
                worker_pid=status.worker_pid,
                default=True,
            )
        ]

    def unload(self) -> None:
        """Unload the model inside the worker (the worker and OpenVINO stay: see release())."""
        with self._lock:
            self._wanted = None
        self._send(UnloadModel())

    # ---- requests ----------------------------------------------------------------------

    def submit(self, request: GenerationRequest) -> RequestStream:
        """Queue a generation (its ``request_id`` is assigned here); iterate the returned
        stream on the calling loop.

        Raises:
            EngineUnavailable: no model is ready (the message says why and for how long).
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            self._check_ready()
            request_id = next(self._ids)
            stream = RequestStream(self, request_id, loop)
            self._streams[request_id] = stream
            if request.keep_alive is not None:  # applies once this request has ended
                self._keep_alive = max(0.0, request.keep_alive)
        request = replace(request, request_id=request_id, keep_alive=None)
        try:
            self._send(Submit(request))
        except OSError as exc:
            self._forget(request_id)
            raise EngineUnavailable("the engine is restarting", RESTARTING, 2) from exc
        except Exception as exc:  # it did not pickle (nothing was sent): refuse it alone
            self._forget(request_id)
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

    async def _one_shot(
        self, command: Callable[[int], Command], param: str, answer: type[_Answer]
    ) -> _Answer:
        """Send the command built for a new request id and wait for its one ``answer``.

        The worker may run it beside a chat model (embeddings, reranking): it needs a
        running worker, not a loaded model. A caller that gives up (a client disconnected)
        cancels it in the worker.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            self._revive()
            if self._closing:  # unloaded or evicted (close_if_idle): the scheduler retries
                raise EngineUnavailable("the model was unloaded; retry", STOPPED, 1)
            if self._process is None or self._status.state == STOPPED:
                raise EngineUnavailable("the engine is not running", self._status.state, None)
            request_id = next(self._ids)
            stream = RequestStream(self, request_id, loop)
            self._streams[request_id] = stream
        try:
            self._send(command(request_id))
        except OSError as exc:
            self._forget(request_id)
            raise EngineUnavailable("the engine is restarting", RESTARTING, 2) from exc
        except Exception as exc:  # it did not pickle (nothing was sent)
            self._forget(request_id)
            raise RequestFailed("invalid_request", unsendable_text(exc, param), param) from exc
        event: Event | None = None
        try:
            event = await stream.next_event()
        finally:
            self._forget(request_id)
            if event is None:  # the caller gave up (a client disconnected): stop the batch
                with contextlib.suppress(OSError):
                    self._send(Cancel(request_id))
        if isinstance(event, answer):
            return event
        if isinstance(event, RequestRejected):
            raise RequestFailed(event.code, event.message, event.param)
        raise RequestFailed("internal", f"unexpected engine event {event!r}")

    def cancel(self, request_id: int) -> None:
        with self._lock:
            if request_id not in self._streams:
                return
        # If the worker is gone, its death handler ends the stream.
        with contextlib.suppress(OSError):
            self._send(Cancel(request_id))

    def _check_ready(self) -> None:
        if self._closing:
            raise EngineUnavailable("the model was unloaded; retry", STOPPED, 1)
        if self._revive():
            raise EngineUnavailable(
                "the engine is restarting after repeated crashes; retry shortly", RESTARTING, 2
            )
        state = self._status.state
        if state == READY:
            return
        if state in (LOADING, STARTING, RESTARTING):
            model = self._status.model.id if self._status.model else "the model"
            raise EngineUnavailable(f"{model} is {state}; retry shortly", state, 2)
        if state == ERROR:
            raise EngineUnavailable(f"the engine failed: {self._status.message}", state, None)
        raise EngineUnavailable("no model is loaded", state, None)
