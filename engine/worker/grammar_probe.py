"""Compile a request's output grammar in a child process before the real pipeline sees it.

GenAI compiles a structured-output grammar (XGrammar) inside ``ContinuousBatchingPipeline
.step()``, not in ``GenerationConfig.validate()`` or ``add_request``, and has no Python API
to compile one alone. A grammar that fails there (``{"enum": []}``, a regex lookahead in a
``pattern``, ``minLength`` > ``maxLength``, a ``$ref`` to nothing) makes that step raise, and
the pipeline never steps again ("already in scheduling phase"): every stream on it ends and
the model must be reloaded. So each new grammar first runs for one token on a second
pipeline over the tiny demo model that ships with Sidelight (under a megabyte). Grammar
errors come from parsing the schema, regex and EBNF, which does not depend on the
vocabulary, so the demo model's tokenizer finds them.

The compile can also take long: it grows superlinearly with a schema's optional properties
(docs/benchmarks.md "Grammar compile"), and ``step()`` holds the GIL, so a probe on a thread
would stall the worker's loop as surely as one on the loop itself. The probe therefore runs
in a child process of the worker (started on the first constrained request, one grammar at
a time) while the worker keeps stepping every other stream. A compile that takes longer
than ``budget_seconds`` ends the child (the next grammar starts a new one) and refuses its
request; the server's limits (``engine/server/grammar_limits.py``) keep the grammars that
get this far well inside the budget. The real pipeline compiles the grammar again over its
own vocabulary, which costs more than the demo's 931 tokens: little for the compact JSON
grammars the worker writes (0.08 s here, 0.2 s over a 151k vocabulary for Claude Code's
tool set), but XGrammar's own JSON schema took 0.17 s here and 27 s there. That is why the
worker writes every schema it can itself (``json_grammar`` and its parts) and sends only
what it cannot to XGrammar's converter.

Verdicts are cached by the grammar's hash (``PreparedRequest.grammar_key``): agents send the
same tool schemas with every request, and a repeated refusal, timeouts included, costs
nothing.

Threading: :class:`GrammarProbe` is used only from the worker's single loop thread; the
child is single-threaded.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import signal
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from engine.worker.errors import short_error
from engine.worker.messages import OutputConstraint

logger = logging.getLogger(__name__)

CACHE_SIZE = 256
# A grammar whose compile on the demo model takes longer is refused. The server's limits
# keep legitimate schemas far below it (the largest allowed compile in 1-2 s on a laptop).
COMPILE_BUDGET_SECONDS = 15.0
# Starting the child (spawn, import OpenVINO GenAI, build the demo pipeline) is not budgeted
# against a grammar, but a child that never gets ready leaves grammars unchecked.
START_SECONDS = 120.0
# The child (about 130 MB: its own OpenVINO and demo pipeline) ends after this long without
# a grammar to compile; the next new grammar starts another (under a second).
IDLE_SECONDS = 300.0
# A child that ends before it is ready this many times in a row is not started again: its
# pipeline cannot be built here, and grammars go unchecked rather than wait for ever.
MAX_EARLY_DEATHS = 2
_MAX_STEPS = 4  # one token: the prompt step and at most a few more


@dataclass(frozen=True)
class Verdict:
    """A probed grammar: ``error`` None when it compiled (or could not be checked)."""

    error: str | None
    seconds: float = 0.0


@dataclass(frozen=True)
class _Job:
    key: str
    constraint: OutputConstraint


def probe_pipeline(model_dir: Path) -> Any:
    """A one-thread ContinuousBatchingPipeline over ``model_dir`` for compiling grammars."""
    import openvino_genai as ov_genai

    scheduler = ov_genai.SchedulerConfig()
    scheduler.num_kv_blocks = 16  # a one-token prompt needs one
    scheduler.enable_prefix_caching = False
    # f32: on a CPU whose default precision is bf16 (AMX: Xeon 4th gen and later), OpenVINO
    # 2026.4 compiles an LLM on one thread into a SIGFPE (its issue 33300, one core by
    # taskset). The probe only compiles grammars, so the precision costs nothing.
    properties = {"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f32"}
    return ov_genai.ContinuousBatchingPipeline(str(model_dir), scheduler, "CPU", properties)


_ids = itertools.count(1)  # request ids on a probe pipeline


def compile_once(pipe: Any, structured: Any) -> str | None:
    """Run ``structured`` for one token on ``pipe``: None when it compiled, else why not.

    A failed step leaves ``pipe`` unusable: build a new one after an error.
    """
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    config = ov_genai.GenerationConfig()
    config.max_new_tokens = 1
    config.do_sample = False
    config.structured_output_config = structured
    try:
        handle = pipe.add_request(next(_ids), ov.Tensor(np.array([[1]], dtype=np.int64)), config)
        for _ in range(_MAX_STEPS):
            if not pipe.has_non_finished_requests():
                break
            pipe.step()
        handle.cancel()
    except Exception as exc:
        logger.info("grammar refused by the probe: %s", exc)
        return short_error(exc)
    return None


def child_main(conn: Connection, model_dir: str | None) -> None:
    """The probe child: build the demo pipeline, then compile each grammar it is sent.

    Answers ``("ready",)`` or ``("unavailable", why)`` once, then ``("verdict", key, error,
    seconds)`` per job. Ends when the worker closes the pipe (or goes away).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from engine.resources import demo_model_path
    from engine.worker.prepare import structured_config

    folder = Path(model_dir) if model_dir else demo_model_path()
    try:
        pipe = probe_pipeline(folder)
    except Exception as exc:
        conn.send(("unavailable", short_error(exc)))
        return
    conn.send(("ready",))
    while True:
        try:
            job: _Job = conn.recv()
        except (EOFError, OSError):
            return
        started = time.perf_counter()
        try:
            error = compile_once(pipe, structured_config(job.constraint).config)
        except Exception as exc:  # a config GenAI cannot build: that grammar's refusal
            error = short_error(exc)
        if error is not None:
            pipe = probe_pipeline(folder)
        conn.send(("verdict", job.key, error, time.perf_counter() - started))


class GrammarProbe:
    """Tells whether GenAI can compile a grammar, without risking a model or the loop.

    :meth:`cached` answers at once for a grammar seen before; :meth:`request` queues a new
    one; :meth:`collect`, called every loop iteration, gives the verdicts that came in (and
    ends a compile past its budget). :attr:`connection` is there to wait on beside the
    worker's own pipe, :meth:`seconds_left` says how long at most.
    """

    def __init__(
        self, model_dir: Path | None = None, budget_seconds: float = COMPILE_BUDGET_SECONDS
    ) -> None:
        self._model_dir = model_dir
        self.budget_seconds = budget_seconds
        self._results: OrderedDict[str, Verdict] = OrderedDict()
        self._queue: deque[_Job] = deque()
        self._queued: set[str] = set()
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._ready = False
        self._spawned = 0.0
        self._running: _Job | None = None
        self._started = 0.0
        self._unavailable: str | None = None
        self._done: list[tuple[str, Verdict]] = []
        self._used = 0.0  # when the child last answered
        self._early_deaths = 0  # children in a row that ended before they were ready

    # ---- the worker's side ----------------------------------------------------------

    def cached(self, key: str) -> Verdict | None:
        """The verdict on a grammar seen before (None: not yet probed)."""
        verdict = self._results.get(key)
        if verdict is not None:
            self._results.move_to_end(key)
        return verdict

    def request(self, key: str, constraint: OutputConstraint) -> None:
        """Queue ``constraint``'s grammar (once, however many requests wait for it)."""
        if key in self._queued or key in self._results:
            return
        if self._unavailable is not None:
            self._done.append((key, Verdict(None)))  # cannot probe: the step isolation holds
            return
        self._queued.add(key)
        self._queue.append(_Job(key, constraint))
        self._next()

    @property
    def child_pid(self) -> int | None:
        """The compiling child's process id, while there is one."""
        return self._process.pid if self._process is not None else None

    @property
    def pending(self) -> bool:
        return bool(self._queue) or self._running is not None or bool(self._done)

    @property
    def connection(self) -> Connection | None:
        """The child's pipe while a verdict is awaited (to wait on it), else None."""
        return self._conn if self._running is not None or not self._ready else None

    def seconds_left(self) -> float | None:
        """How long until the running compile (or the child's start) is out of time."""
        if self._done:
            return 0.0
        if self._running is not None:
            return max(0.0, self._started + self.budget_seconds - time.monotonic())
        if self._conn is not None and not self._ready:
            return max(0.0, self._spawned + START_SECONDS - time.monotonic())
        return None

    def collect(self) -> list[tuple[str, Verdict]]:
        """The verdicts reached since the last call (each grammar once)."""
        self._read()
        if self._running is not None and time.monotonic() - self._started > self.budget_seconds:
            key = self._running.key
            logger.warning("a grammar compile passed %.0f s; ending the probe", self.budget_seconds)
            self._stop_child()
            error = (
                f"compiling its grammar took longer than {self.budget_seconds:g} s; "
                "use fewer optional properties, tools or enum values"
            )
            self._finish(key, Verdict(error, self.budget_seconds))
        elif (
            self._conn is not None
            and not self._ready
            and time.monotonic() - self._spawned > START_SECONDS
        ):
            self._give_up("the grammar probe did not start in time")
        self._next()
        done, self._done = self._done, []
        return done

    def tidy(self) -> None:
        """End an idle child (see :data:`IDLE_SECONDS`); cheap enough for every loop."""
        if (
            self._conn is not None
            and self._ready
            and self._running is None
            and not self._queue
            and time.monotonic() - self._used > IDLE_SECONDS
        ):
            logger.info("the grammar probe was idle for %.0f s; ending it", IDLE_SECONDS)
            self._stop_child()

    def close(self) -> None:
        self._stop_child()

    # ---- the child ------------------------------------------------------------------

    def _next(self) -> None:
        if self._running is not None or not self._queue or self._unavailable is not None:
            return
        if self._conn is None:
            self._spawn()
            return
        if not self._ready:
            return
        job = self._queue.popleft()
        try:
            self._conn.send(job)
        except (OSError, ValueError) as exc:  # the child ended while idle: not this grammar's fault
            logger.warning("the grammar probe went away (%s); starting another", short_error(exc))
            self._stop_child()
            self._queue.appendleft(job)
            self._spawn()
            return
        self._running = job
        self._started = time.monotonic()

    def _read(self) -> None:
        conn = self._conn
        while conn is not None and conn is self._conn:
            try:
                if not conn.poll(0):
                    return
                message = conn.recv()
            except (EOFError, OSError):
                if not self._ready:
                    self._died_starting()
                    return
                running = self._running.key if self._running is not None else None
                self._lost("the grammar compile ended its process", running)
                return
            if message[0] == "ready":
                self._ready = True
                self._early_deaths = 0
                self._used = time.monotonic()
            elif message[0] == "unavailable":
                self._give_up(str(message[1]))
            elif message[0] == "verdict" and self._running is not None:
                _, key, error, seconds = message
                self._running = None
                self._used = time.monotonic()
                self._finish(key, Verdict(error, float(seconds)))

    def _finish(self, key: str, verdict: Verdict) -> None:
        self._queued.discard(key)
        self._results[key] = verdict
        if len(self._results) > CACHE_SIZE:
            self._results.popitem(last=False)
        self._done.append((key, verdict))

    def _lost(self, why: str, running: str | None) -> None:
        """The child died: its grammar is refused (it may be why), the others go on."""
        logger.warning("%s", why)
        self._stop_child()
        if running is not None:
            self._finish(running, Verdict(why))

    def _died_starting(self) -> None:
        """The child ended while building its pipeline (a crash in OpenVINO, say): try once
        more, then give up, so that no request waits on a child that can never be ready."""
        process = self._process
        if process is not None:
            process.join(5)
        code = process.exitcode if process is not None else None
        self._early_deaths += 1
        why = f"the grammar probe ended while starting (exit code {code})"
        if self._early_deaths >= MAX_EARLY_DEATHS:
            self._give_up(f"{why}, {self._early_deaths} times")
            return
        logger.warning("%s; starting another", why)
        self._stop_child()

    def _give_up(self, why: str) -> None:
        """No probe in this worker: every grammar goes unchecked (the backend's step
        isolation still blames a failing grammar on its own request)."""
        logger.warning("no grammar probe: schemas are not checked early (%s)", why)
        self._unavailable = why
        self._stop_child()
        for job in self._queue:
            self._done.append((job.key, Verdict(None)))
        self._queue.clear()
        self._queued.clear()

    def _spawn(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe(duplex=True)
        model_dir = str(self._model_dir) if self._model_dir is not None else None
        process = ctx.Process(
            target=child_main, args=(child, model_dir), name="grammar-probe", daemon=True
        )
        try:
            _start_from_daemon(process)
        except Exception as exc:
            self._give_up(f"cannot start the grammar probe: {short_error(exc)}")
            return
        finally:
            child.close()
        self._process, self._conn = process, parent
        self._ready = False
        self._spawned = time.monotonic()

    def _stop_child(self) -> None:
        process, conn = self._process, self._conn
        self._process = self._conn = None
        self._ready = False
        if self._running is not None:
            self._queued.discard(self._running.key)
        self._running = None
        if conn is not None:
            conn.close()
        if process is not None and process.is_alive():
            process.kill()
            process.join(5)


def _start_from_daemon(process: BaseProcess) -> None:
    """Start ``process`` from the engine worker, itself a daemonic process.

    multiprocessing refuses children to daemonic processes, so that they are not orphaned.
    This child is daemonic too (the worker's exit ends it) and ends by itself when its pipe
    closes, which is what the rule protects, so the worker's flag is lifted while it starts.
    """
    config: dict[str, Any] = getattr(multiprocessing.current_process(), "_config", {})
    daemon = config.get("daemon")
    config["daemon"] = False
    try:
        process.start()
    finally:
        if daemon is None:
            config.pop("daemon", None)
        else:
            config["daemon"] = daemon
