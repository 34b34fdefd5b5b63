"""The engine worker process: owns the OpenVINO pipeline and runs the generation loop.

Started by :class:`engine.supervisor.client.EngineClient` with the ``spawn`` method. One thread does
everything: read commands from the pipe, take the grammar probe's verdicts, run one engine
step, run one chunk of embeddings or reranking, send the events. Grammars compile in the
probe's own child process (engine.worker.grammar_probe), so a long compile never holds the
loop: it waits on the server's pipe and the probe's together. Nothing one request carries (a value C++ cannot take, a
grammar XGrammar cannot compile, text that is not Unicode) ends the loop: it becomes that
request's rejection or error. A crash or an out-of-memory kill here ends only this process; the
client restarts it.
"""

from __future__ import annotations

import collections
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from engine.context_fit import GIB
from engine.ir_check import IRError, check_ir
from engine.models import ModelError, verify_files
from engine.worker.backends import Backend, BatchedBackend, SerialBackend
from engine.worker.bytelevel import verified_byte_table
from engine.worker.embeddings import EmbeddingRunner, EmbedJob, EmbedRefused
from engine.worker.errors import PIPE_ERRORS, load_failure, short_error
from engine.worker.grammar_probe import GrammarProbe
from engine.worker.load_plan import is_device, plan_load
from engine.worker.messages import (
    Cancel,
    Command,
    Embed,
    Embedded,
    Event,
    LoadModel,
    LoadProgress,
    ModelLoaded,
    ModelLoadFailed,
    ModelUnloaded,
    Ping,
    Pong,
    RequestRejected,
    Rerank,
    Reranked,
    Shutdown,
    Speculation,
    Submit,
    Synthesize,
    Synthesized,
    Transcribe,
    Transcribed,
    UnloadModel,
    WorkerStarted,
)
from engine.worker.prefix_ledger import PrefixLedger, block_size_for, capacity_blocks
from engine.worker.rerank import RerankJob, RerankRefused, RerankRunner
from engine.worker.speech import SpeechRefused, SpeechRunner
from engine.worker.stop_tokens import ModelFormat, declared_eos_ids
from engine.worker.text_speech import SynthesisRefused, TextSpeechRunner
from engine.worker.vision import image_token_counter

logger = logging.getLogger(__name__)

IDLE_POLL_SECONDS = 0.5
# A loaded chat model's grammar compiler is started after this long idle (see
# BatchedBackend.warm_grammar): late enough that the request a load was for has come in.
WARM_GRAMMAR_AFTER_SECONDS = 3.0


def worker_main(
    conn: Connection, log_dir: str | None, log_level: str, below_normal: bool = False
) -> None:
    """Process entry point (must stay importable without side effects for ``spawn``)."""
    # Ctrl+C in a terminal reaches the whole process group; the server decides when we stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if log_dir:
        from engine.logs import ENGINE_LOG_FILE_NAME, setup_logging

        setup_logging(Path(log_dir), log_level, console=True, file_name=ENGINE_LOG_FILE_NAME)
    if below_normal:
        _lower_priority()
    probe = GrammarProbe()
    worker = Worker(conn, grammar_probe=probe)
    try:
        worker.run()
    except (EOFError, ConnectionError, KeyboardInterrupt):
        pass  # the server went away; nothing left to serve
    finally:
        probe.close()
        logger.info("engine worker %d exiting", os.getpid())


def _lower_priority() -> None:
    """Yield the CPU to interactive work: the server, the tray, the person's IDE.

    Inference saturates every core; at normal priority the HTTP server and the desktop
    wait for the OS to preempt it. Below normal costs nothing when nothing else runs.
    """
    import psutil

    try:
        if sys.platform == "win32":
            psutil.Process().nice(psutil.BELOW_NORMAL_PRIORITY_CLASS)
        else:
            os.nice(5)
    except (OSError, psutil.Error):
        logger.warning("could not lower the engine's priority", exc_info=True)


class Worker:
    """The command/step loop. Not thread-safe: one thread only."""

    def __init__(self, conn: Connection, *, grammar_probe: GrammarProbe | None) -> None:
        """``grammar_probe`` checks grammars before they reach a pipeline (None: no check)."""
        self._conn = conn
        self._backend: Backend | None = None
        self._embeddings = EmbeddingRunner()
        self._reranker = RerankRunner()
        self._speech = SpeechRunner()
        self._voice = TextSpeechRunner()
        # Embed and Rerank requests, oldest first, worked through a chunk at a time.
        self._encoder_jobs: collections.deque[EmbedJob | RerankJob] = collections.deque()
        # Fair shares while both run: chat steps get as much time as the last embedding
        # or rerank chunk took before the next chunk runs.
        self._chat_seconds = 0.0
        self._chunk_seconds = 0.0
        self._probe = grammar_probe
        self._loaded: LoadModel | None = None
        self._stopping = False
        self._idle_since: float | None = None  # when the loop last became idle
        self._grammar_warm = False  # the loaded pipeline's grammar compiler has started
        self._warm_failed = False  # once it failed, never again in this worker

    def run(self) -> None:
        self._send([WorkerStarted(os.getpid())])
        while not self._stopping:
            self._poll(0.0 if self._busy() else self._idle_seconds())
            if not self._stopping:  # (a Shutdown may have come in the poll)
                self._probed()
                self._chat_step()
                self._encoder_step()
                self._idle_chores()
        if self._backend is not None:
            self._backend.close()

    def _busy(self) -> bool:
        return bool(self._encoder_jobs) or (self._backend is not None and self._backend.has_work())

    def _idle_seconds(self) -> float:
        """How long an idle loop waits: until a command, or the probe's next deadline."""
        left = self._probe.seconds_left() if self._probe is not None else None
        return IDLE_POLL_SECONDS if left is None else min(IDLE_POLL_SECONDS, left)

    def _idle_chores(self) -> None:
        """Work done only when nothing waits: starting the grammar compiler once per load."""
        if self._busy() or self._conn.poll(0):
            self._idle_since = None
            return
        now = time.monotonic()
        if self._idle_since is None:
            self._idle_since = now
        backend = self._backend
        if (
            self._grammar_warm
            or now - self._idle_since < WARM_GRAMMAR_AFTER_SECONDS
            or not isinstance(backend, BatchedBackend)
            or self._loaded is None
            or self._loaded.spec.task == "vision"  # a VLM pipeline takes text prompts
        ):
            return
        self._grammar_warm = True
        started = time.perf_counter()
        error = backend.warm_grammar()
        if error is None:
            logger.info("grammar compiler started in %.1fs", time.perf_counter() - started)
            return
        logger.warning("starting the grammar compiler failed: %s", error)
        if error != "busy":
            self._warm_failed = True
            self._reload(backend)  # a failed step leaves the pipeline unusable

    def _probed(self) -> None:
        """Hand the grammar probe's verdicts to the requests waiting for them."""
        if self._probe is None:
            return
        if not self._probe.pending:
            self._probe.tidy()
            return
        for key, verdict in self._probe.collect():
            if self._backend is not None:
                events = self._backend.probed(key, verdict)
                if events:
                    self._send(events)

    def _send(self, events: list[Event]) -> None:
        self._conn.send(events)

    def _poll(self, timeout: float) -> None:
        """Handle every command waiting on the pipe (waiting up to ``timeout`` for the first,
        or for the grammar probe's answer, whichever comes first)."""
        probe = self._probe.connection if self._probe is not None else None
        if timeout > 0 and probe is not None:
            wait([self._conn, probe], timeout)
            timeout = 0.0
        while self._conn.poll(timeout):
            timeout = 0.0
            try:
                command = self._conn.recv()
            except (EOFError, OSError):
                raise  # the pipe itself failed: the server is gone
            except Exception:  # a message that does not unpickle: nothing to answer
                logger.exception("unreadable command from the server")
                continue
            if not isinstance(command, Ping):  # a load above all starts the idle wait anew
                self._idle_since = None
            try:
                self._handle(command)
            except PIPE_ERRORS:
                raise
            except Exception as exc:  # one command never ends the loop
                logger.exception("handling %s failed", type(command).__name__)
                self._refuse(command, exc)

    def _refuse(self, command: Command, exc: Exception) -> None:
        """Tell the client a request's command failed (other commands are only logged)."""
        rid = None
        if isinstance(command, Submit):
            rid = command.request.request_id
        elif isinstance(command, Embed | Rerank | Transcribe | Synthesize):
            rid = command.request_id
        if rid is not None:
            self._send([RequestRejected(rid, "internal", f"engine error: {short_error(exc)}")])

    def _chat_step(self) -> None:
        backend = self._backend
        if backend is None or not backend.has_work():
            return
        started = time.perf_counter()
        try:
            backend.step(self._send, lambda: self._poll(0.0))
        except PIPE_ERRORS:
            raise
        except Exception as exc:  # a bug outside GenAI's step: end what was running
            logger.exception("engine step failed")
            self._send(backend.fail(f"engine error: {short_error(exc)}"))
        self._chat_seconds += time.perf_counter() - started
        if backend.broken and backend is self._backend and self._loaded is not None:
            self._reload(backend)

    def _reload(self, broken: Backend) -> None:
        """Rebuild a pipeline a failed step left unusable; carry its survivors over."""
        survivors, broken.survivors = broken.survivors, []
        if self._loaded is not None:
            self._load(self._loaded)
        if self._backend is not None:
            events = self._backend.adopt(survivors)
        else:
            events = broken.adopt(survivors)  # no model now: they end with an error
        if events:
            self._send(events)

    def _handle(self, command: Command) -> None:
        if isinstance(command, Submit):
            if self._backend is None:
                rid = command.request.request_id
                self._send([RequestRejected(rid, "no_model", "no model is loaded")])
            else:
                request = command.request
                backend = self._backend
                events = backend.count(request) if request.count_only else backend.submit(request)
                if events:
                    self._send(events)
        elif isinstance(command, Cancel):
            self._cancel(command.request_id)
        elif isinstance(command, LoadModel):
            self._load(command)
        elif isinstance(command, UnloadModel):
            self._unload()
            self._send([ModelUnloaded()])
        elif isinstance(command, Embed):
            self._start_embed(command)
        elif isinstance(command, Rerank):
            self._start_rerank(command)
        elif isinstance(command, Transcribe | Synthesize):
            self._audio(command)
        elif isinstance(command, Ping):
            self._send([Pong(command.token)])
        elif isinstance(command, Shutdown):
            self._stopping = True

    def _cancel(self, request_id: int) -> None:
        for job in self._encoder_jobs:
            if job.request_id == request_id:
                self._encoder_jobs.remove(job)
                self._send([RequestRejected(request_id, "internal", "cancelled")])
                return
        if self._backend is not None:
            events = self._backend.cancel(request_id)
            if events:
                self._send(events)

    def _start_embed(self, command: Embed) -> None:
        if _first_not_unicode(command.texts) is not None:
            self._send([_not_unicode(command.request_id, "input")])
            return
        job = EmbedJob(
            command.request_id,
            command.spec,
            command.device,
            command.texts,
            truncate=command.truncate,
        )
        if job.done:
            self._send([Embedded(job.request_id, [], 0)])
        else:
            self._encoder_jobs.append(job)

    def _start_rerank(self, command: Rerank) -> None:
        if _first_not_unicode((command.query,)) is not None:
            self._send([_not_unicode(command.request_id, "query")])
            return
        bad = _first_not_unicode(command.documents)
        if bad is not None:
            self._send([_not_unicode(command.request_id, f"documents.{bad}")])
            return
        job = RerankJob(
            command.request_id, command.spec, command.device, command.query, command.documents
        )
        if job.done:
            self._send([Reranked(job.request_id, [], 0)])
        else:
            self._encoder_jobs.append(job)

    def _audio(self, command: Transcribe | Synthesize) -> None:
        """One window to transcribe or one piece of text to speak, run now: a recogniser or
        a synthesiser has a worker of its own (no chat to share with), and the server sends
        the next window or piece only after this one's answer."""
        rid = command.request_id
        run: Callable[[], Transcribed | Synthesized]
        if isinstance(command, Transcribe):
            window = command
            run, what = (lambda: self._speech.transcribe(window)), "transcription"
        else:
            piece = command
            run, what = (lambda: self._voice.synthesize(piece)), "speech synthesis"
        try:
            self._send([run()])
        except (SpeechRefused, SynthesisRefused) as exc:
            self._send([RequestRejected(rid, "invalid_request", str(exc), exc.param)])
        except ModelError as exc:  # its files failed their check: name the file, not GenAI
            logger.warning("not loading %s: %s", command.spec.id, exc)
            message = (
                f"the model '{command.spec.id}' is damaged: {exc}; remove it (sidelight rm) "
                "and download it again"
            )
            self._send([RequestRejected(rid, "model_damaged", message, "model")])
        except PIPE_ERRORS:
            raise
        except Exception as exc:
            logger.exception("%s with %s failed", what, command.spec.id)
            message = f"{what} failed: {short_error(exc)}"
            self._send([RequestRejected(rid, "internal", message)])

    def _encoder_step(self) -> None:
        """Run one chunk of the oldest embed or rerank job once chat steps had their share."""
        if not self._encoder_jobs:
            return
        chatting = self._backend is not None and self._backend.has_work()
        if chatting and self._chat_seconds < self._chunk_seconds:
            return
        job = self._encoder_jobs[0]
        what = "embedding" if isinstance(job, EmbedJob) else "reranking"
        started = time.perf_counter()
        try:
            if isinstance(job, EmbedJob):
                self._embeddings.run_chunk(job)
            else:
                self._reranker.run_chunk(job)
        except (RerankRefused, EmbedRefused) as exc:
            self._encoder_jobs.popleft()
            self._send([RequestRejected(job.request_id, "invalid_request", str(exc), exc.param)])
            return
        except ModelError as exc:  # its files failed their check: name the file, not GenAI
            logger.warning("not loading %s: %s", job.spec.id, exc)
            self._encoder_jobs.popleft()
            message = (
                f"the model '{job.spec.id}' is damaged: {exc}; remove it (sidelight rm) and "
                "download it again"
            )
            self._send([RequestRejected(job.request_id, "model_damaged", message, "model")])
            return
        except Exception as exc:
            logger.exception("%s with %s failed", what, job.spec.id)
            self._encoder_jobs.popleft()
            message = f"{what} failed: {short_error(exc)}"
            self._send([RequestRejected(job.request_id, "internal", message)])
            return
        finally:
            self._chunk_seconds = time.perf_counter() - started
            self._chat_seconds = 0.0
        if job.done:
            self._encoder_jobs.popleft()
            if isinstance(job, EmbedJob):
                self._send([Embedded(job.request_id, job.vectors, job.tokens)])
            else:
                self._send([Reranked(job.request_id, job.scores, job.tokens)])

    def _unload(self) -> None:
        if self._backend is not None:
            events = self._backend.close()
            if events:
                self._send(events)
            self._backend = None

    def _load(self, command: LoadModel) -> None:
        self._unload()
        spec = command.spec
        started = time.perf_counter()
        self._send([LoadProgress("compiling", f"loading {spec.id} on {command.device}")])
        try:
            verify_files(spec)  # the server checked too; the files may have changed since
            backend = _build_backend(command)
        except ModelError as exc:
            logger.warning("not loading %s: %s", spec.id, exc)
            self._send([ModelLoadFailed(spec, command.device, str(exc), damaged=True)])
            return
        except Exception as exc:
            logger.exception("loading %s failed", spec.id)
            message, damaged = load_failure(exc)
            self._send([ModelLoadFailed(spec, command.device, message, damaged)])
            return
        backend.stream_interval = command.stream_interval
        backend.grammar_probe = self._probe
        backend.stop_on(declared_eos_ids(spec.path, _model_format(spec.format)))
        if spec.path.is_dir():
            backend.byte_table = verified_byte_table(spec.path, backend.tokenizer)
        if spec.task == "vision":
            backend.image_tokens = image_token_counter(spec.path)
        logger.info("detokenizing with %s", "a byte table" if backend.byte_table else "GenAI")
        self._backend = backend
        self._loaded = command
        self._grammar_warm = self._warm_failed
        seconds = time.perf_counter() - started
        logger.info("loaded %s on %s (%s) in %.1fs", spec.id, command.device, backend.name, seconds)
        self._send(
            [
                ModelLoaded(
                    spec,
                    command.device,
                    backend.name,
                    seconds,
                    backend.context_length,
                    backend.chat_template,
                    backend.fim_tokens,
                    backend.speculation,
                )
            ]
        )


def _first_not_unicode(texts: tuple[str, ...]) -> int | None:
    """The index of the first text holding a lone surrogate (which C++ cannot take)."""
    for index, text in enumerate(texts):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return index
    return None


def _not_unicode(request_id: int, param: str) -> RequestRejected:
    message = (
        f"{param} holds text that is not valid Unicode (a lone surrogate); "
        "encode it as a whole character"
    )
    return RequestRejected(request_id, "invalid_request", message, param)


def _build_backend(command: LoadModel) -> Backend:
    import openvino_genai as ov_genai

    spec = command.spec
    plan = plan_load(command)
    logger.info(
        "%s on %s: context %s (limited by %s, KV cache %s, %d GB)",
        spec.id,
        command.device,
        plan.context_length,
        plan.fit.limited_by,
        plan.fit.precision,
        plan.cache_size_gb,
    )
    properties: dict[str, Any] = dict(plan.properties)
    if spec.task == "vision" and plan.kind == "serial":
        # GenAI's NPU path for a vision-language model: VLMPipeline, one image a request.
        vlm = ov_genai.VLMPipeline(str(spec.path), command.device, **properties)
        serial_vlm = SerialBackend(vlm, plan.context_length)
        serial_vlm.prompt_limit = plan.prompt_limit
        serial_vlm.max_images = 1 if is_device(command.device, "NPU") else None
        return serial_vlm
    if plan.kind == "serial":
        pipe = ov_genai.LLMPipeline(str(spec.path), command.device, **properties)
        serial = SerialBackend(pipe, plan.context_length)
        serial.prompt_limit = plan.prompt_limit
        return serial
    scheduler = ov_genai.SchedulerConfig()
    scheduler.enable_prefix_caching = True
    scheduler.cache_size = plan.cache_size_gb
    scheduler.dynamic_split_fuse = True
    # GenAI 2026.4 does not pass a VLM prompt's ids to prompt lookup (add_request with
    # images): a vision-language model runs without speculation.
    speculation: Speculation = "off" if spec.task == "vision" else _speculation(command)
    pipe = None
    if speculation == "draft" and command.draft_path is not None:
        draft_device = command.draft_device or command.device
        try:
            check_ir(Path(command.draft_path))  # a damaged draft must not reach OpenVINO
            draft = ov_genai.draft_model(command.draft_path, draft_device)
            drafted = {**properties, "draft_model": draft}
            pipe = ov_genai.ContinuousBatchingPipeline(
                str(spec.path), scheduler, command.device, drafted
            )
        except IRError as exc:  # the model itself is fine: serve it without the draft
            logger.warning(
                "the draft model %s is damaged (%s); not using it", command.draft_path, exc
            )
            speculation = "prompt_lookup" if command.prompt_lookup else "off"
        except Exception:  # a draft that does not fit this model: run without it, loudly
            logger.exception("the draft model %s cannot pair with %s", command.draft_path, spec.id)
            speculation = "prompt_lookup" if command.prompt_lookup else "off"
    if speculation == "prompt_lookup":
        properties["prompt_lookup"] = True
    if pipe is None:
        pipe = ov_genai.ContinuousBatchingPipeline(
            str(spec.path), scheduler, command.device, properties
        )
    batched = BatchedBackend(pipe, plan.context_length)
    batched.ledger = _prefix_ledger(command, plan.cache_size_gb, properties)
    batched.prompt_limit = plan.prompt_limit
    batched.speculation = speculation
    batched.speculative_tokens = command.speculative_tokens
    batched.max_ngram_size = command.max_ngram_size
    logger.info(
        "speculative decoding: %s%s",
        speculation,
        f" ({command.speculative_tokens} tokens per step)" if speculation != "off" else "",
    )
    return batched


def _prefix_ledger(
    command: LoadModel, cache_size_gb: int, properties: dict[str, Any]
) -> PrefixLedger:
    """The ledger behind each request's ``cached_tokens`` (see engine.worker.prefix_ledger):
    GenAI's block size on this device and the pool's capacity in blocks."""
    block_size = block_size_for(command.device)
    precision = properties.get("KV_CACHE_PRECISION")
    capacity = capacity_blocks(
        cache_size_gb * GIB, command.spec.kv_dims, block_size, str(precision or "")
    )
    logger.info("prefix cache: blocks of %d tokens, about %s blocks", block_size, capacity)
    return PrefixLedger(block_size, capacity)


def _model_format(value: str) -> ModelFormat:
    return "gguf" if value == "gguf" else "ir"


def _speculation(command: LoadModel) -> Speculation:
    """Which speculative decoding a batched pipeline runs: a draft model wins over lookup.

    GenAI refuses a draft whose tokenizer differs from the model's; then the pipeline is
    built again without it (see :func:`_build_backend`).
    """
    if command.speculative_tokens < 1:
        return "off"
    if command.draft_path is not None:
        return "draft"
    return "prompt_lookup" if command.prompt_lookup else "off"
