"""The worker process and its pipe: spawning, reading events, reaping retired workers.

No event loop ever waits on inference: events are read either by a reader thread that blocks
on the pipe (releasing the GIL), or, once a server calls :meth:`WorkerHandle.read_on_loop`,
by that server's event loop itself (``add_reader``), which saves a thread wake-up and a GIL
hand-off per token (on a 2-core laptop every wake-up steals time from inference). Events go
to the loop that submitted their request: directly when it is the reading loop, otherwise
with ``call_soon_threadsafe``. Several loops may use one client at once (uvicorn's, a chat
window's worker thread). Loop reading needs a selector loop on a POSIX pipe; elsewhere
(Windows' pipes and proactor loops) the reader thread stays. The hand-over from the thread
to the loop happens at a :class:`Pong`, so no event is lost or reordered.

A part of the engine client (see :mod:`engine.supervisor.core`): it receives the shared
state and the :class:`~engine.supervisor.routing.Router` it hands every step's events to.
What happens when a worker exits is the restart policy's business
(:meth:`engine.supervisor.watchdog.Watchdog.on_worker_exit`, wired in as
:attr:`WorkerHandle.on_exit` by the client); this part only reports it.

Threading: :meth:`WorkerHandle.read_on_loop` and :meth:`WorkerHandle.read_on_thread` run on
the loop concerned; the reader thread (``engine-reader-<pid>``) and the loop's reader call
the router; a pipe's end seen on the loop calls ``on_exit`` on a short-lived
``engine-exit`` thread. Everything else runs with the state's lock held or takes it, which
also guards this part's own attributes. :meth:`WorkerHandle.reap` runs on a short-lived
``engine-retire`` thread per retired worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Literal

from engine.supervisor.core import ClientState
from engine.supervisor.routing import Router
from engine.supervisor.states import RESTARTING, STARTING
from engine.worker.messages import Event, Ping
from engine.worker.process import worker_main

logger = logging.getLogger(__name__)

ReadMode = Literal["thread", "handing", "attaching", "loop"]
"""Who reads the worker pipe: a reader thread; the thread, until it reaches the hand-over
Pong; the loop, once its scheduled ``add_reader`` runs; the loop."""


class WorkerHandle:
    """Spawns the worker process and reads its pipe on a thread or an event loop."""

    def __init__(self, state: ClientState, router: Router) -> None:
        self._state = state
        self._router = router
        self._ctx = multiprocessing.get_context("spawn")
        self.reader: threading.Thread | None = None  # the reader thread, while one reads
        # Reading on an event loop: the loop asked for, and where the hand-over stands
        # (see ReadMode; "handing" stops at the Pong ``ClientState.handover``).
        self._read_loop: asyncio.AbstractEventLoop | None = None
        self._reading: ReadMode = "thread"
        # Retired workers (ended to free memory) and their pipes, closed once they exit.
        self.retired: dict[Any, Connection] = {}
        # What follows a worker's exit: the restart policy, wired by the client to
        # Watchdog.on_worker_exit (built after this part, since it spawns through it).
        self.on_exit: Callable[[Any], None] = _no_restart_policy

    def spawn(self) -> None:
        """Start a worker process and read its pipe (lock held; state -> ``starting``, or
        stays ``restarting``)."""
        shared, settings = self._state, self._state.settings
        parent, child = self._ctx.Pipe(duplex=True)
        log_dir = str(settings.paths.log_dir)
        process = self._ctx.Process(
            target=worker_main,
            args=(child, log_dir, settings.log_level, settings.engine_below_normal),
            name="sidelight-engine",
            daemon=True,
        )
        shared.update(
            state=STARTING if shared.status.state != RESTARTING else RESTARTING, worker_pid=None
        )
        process.start()
        child.close()  # so the pipe reports EOF when the worker dies
        shared.process, shared.conn = process, parent
        shared.heard, shared.ping_token = time.monotonic(), None
        shared.worker_loading = False
        loop = self._read_loop
        if loop is not None:
            self._reading = "attaching"
            try:
                loop.call_soon_threadsafe(self._attach, loop, process, parent)
                return
            except RuntimeError:  # the loop is closed
                self._read_loop = None
        self._start_thread(process, parent)

    def _start_thread(self, process: Any, conn: Connection) -> None:
        """Read ``conn`` on a new reader thread (caller holds the lock)."""
        self._reading = "thread"
        self.reader = threading.Thread(
            target=self._thread_reader,
            args=(process, conn),
            name=f"engine-reader-{process.pid}",
            daemon=True,
        )
        self.reader.start()

    @property
    def reads_on(self) -> Literal["loop", "thread"]:
        """Who reads the worker pipe now: ``"loop"``, or ``"thread"`` (also mid-hand-over)."""
        with self._state.lock:
            return "loop" if self._reading == "loop" else "thread"

    def read_on_loop(self) -> None:
        """Read worker events on the running event loop from now on (call on that loop).

        A server calls this when it starts so tokens reach its streams without a thread
        hop. The reader thread finishes what it has read and stops at a :class:`Pong`, so no
        event is lost or reordered. Does nothing where the loop cannot watch the pipe.
        """
        loop = asyncio.get_running_loop()
        if sys.platform == "win32" or not isinstance(loop, asyncio.SelectorEventLoop):
            logger.debug("engine events stay on the reader thread (%s)", type(loop).__name__)
            return
        with self._state.lock:
            if self._read_loop is not None:
                return
            self._read_loop = loop
            if self._state.conn is None or self._reading != "thread":
                return  # spawn attaches the next worker's pipe to the loop
            self._state.handover = token = next(self._state.ids)
            self._reading = "handing"
        with contextlib.suppress(OSError):  # the worker died; spawn attaches the next one
            self._state.send(Ping(token))

    def read_on_thread(self) -> None:
        """Give reading back to a reader thread (call on the reading loop before it stops)."""
        with self._state.lock:
            loop, self._read_loop = self._read_loop, None
            if loop is None:
                return
            conn = self._state.conn
            if self._reading == "handing":
                self._reading = "thread"  # the thread ignores the Pong and reads on
            elif self._reading in ("attaching", "loop") and conn is not None:
                if self._reading == "loop":
                    loop.remove_reader(conn.fileno())
                self._start_thread(self._state.process, conn)  # a pending _attach backs off

    def _attach(self, loop: asyncio.AbstractEventLoop, process: Any, conn: Connection) -> None:
        """On ``loop``: start watching ``conn`` (scheduled by the thread or by spawn).

        A stale call backs off: whenever the state is ``"attaching"``, an ``_attach`` for
        the current loop and pipe was scheduled after the last change of either.
        """
        with self._state.lock:
            if (
                self._reading != "attaching"
                or conn is not self._state.conn
                or self._read_loop is not loop
            ):
                return
            loop.add_reader(conn.fileno(), self._loop_reader, loop, process, conn)
            self._reading = "loop"

    def detach_for_close(self, conn: Connection | None) -> None:
        """Stop the loop watching ``conn`` before it is closed (close() may run anywhere)."""
        with self._state.lock:
            loop, reading = self._read_loop, self._reading
        if conn is None or loop is None or reading != "loop":
            return
        done = threading.Event()

        def detach() -> None:
            with contextlib.suppress(ValueError, OSError):
                loop.remove_reader(conn.fileno())
            done.set()

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            detach()
            return
        with contextlib.suppress(RuntimeError):  # a closed loop watches nothing
            loop.call_soon_threadsafe(detach)
            done.wait(2.0)

    def _thread_reader(self, process: Any, conn: Connection) -> None:
        while True:
            try:
                events: list[Event] = conn.recv()
            except (EOFError, OSError):
                break
            except Exception:  # a corrupt message must not kill supervision
                logger.exception("bad message from engine worker")
                continue
            if self._router.dispatch(events, None) and self._hand_over(process, conn):
                return  # the loop reads from here on
        self.on_exit(process)

    def _hand_over(self, process: Any, conn: Connection) -> bool:
        """On the reader thread, at the hand-over Pong: schedule the loop's reader."""
        with self._state.lock:
            loop = self._read_loop
            if self._reading != "handing" or loop is None:
                return False
            self._reading = "attaching"
            try:
                loop.call_soon_threadsafe(self._attach, loop, process, conn)
            except RuntimeError:  # the loop closed meanwhile
                self._read_loop, self._reading = None, "thread"
                return False
            self.reader = None
            return True

    def _loop_reader(self, loop: asyncio.AbstractEventLoop, process: Any, conn: Connection) -> None:
        """On the reading loop, when the pipe is readable.

        ``recv`` may block the loop for the rest of a message, which the worker is already
        writing (only embeddings are large), never for the next engine step.
        """
        try:
            events: list[Event] = conn.recv()
        except (EOFError, OSError):
            with self._state.lock, contextlib.suppress(OSError):  # close() may have closed it
                loop.remove_reader(conn.fileno())
            with self._state.lock:
                if self._reading == "loop" and conn is self._state.conn:
                    self._reading = "thread"
            threading.Thread(
                target=self.on_exit, args=(process,), name="engine-exit", daemon=True
            ).start()
            return
        except Exception:
            logger.exception("bad message from engine worker")
            return
        self._router.dispatch(events, loop)

    def reap(self, process: Any) -> None:
        """Wait for a retired worker to exit (kill it after 10 s), then close its pipe."""
        process.join(10)
        if process.is_alive():
            logger.warning("retired engine worker %s did not exit; killing it", process.pid)
            process.kill()
            process.join(5)
        with self._state.lock:
            conn = self.retired.pop(process, None)
        self.detach_for_close(conn)
        if conn is not None:
            conn.close()


def _no_restart_policy(process: Any) -> None:
    """``WorkerHandle.on_exit`` until the client wires the watchdog's restart policy."""
    logger.error("engine worker %s exited and no restart policy is wired", process.pid)
