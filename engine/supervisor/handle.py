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

What happens when a worker exits is the restart policy's business
(:meth:`engine.supervisor.watchdog.Watchdog._on_worker_exit`); this layer only reports it.

Threading: :meth:`read_on_loop` and :meth:`read_on_thread` run on the loop concerned; the
reader thread and the loop's reader call the router; everything else runs with ``_lock``
held or takes it. ``_reap`` runs on a short-lived thread per retired worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any, Literal

from engine.supervisor.routing import EventRouter
from engine.supervisor.states import RESTARTING, STARTING
from engine.worker.messages import Event, Ping
from engine.worker.process import worker_main

logger = logging.getLogger(__name__)


class WorkerHandle(EventRouter):
    """Spawns the worker process and reads its pipe on a thread or an event loop."""

    def _spawn(self) -> None:
        parent, child = self._ctx.Pipe(duplex=True)
        log_dir = str(self._settings.paths.log_dir)
        process = self._ctx.Process(
            target=worker_main,
            args=(child, log_dir, self._settings.log_level, self._settings.engine_below_normal),
            name="sidelight-engine",
            daemon=True,
        )
        self._set(
            state=STARTING if self._status.state != RESTARTING else RESTARTING, worker_pid=None
        )
        process.start()
        child.close()  # so the pipe reports EOF when the worker dies
        self._process, self._conn = process, parent
        self._heard, self._ping_token = time.monotonic(), None
        self._worker_loading = False
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
        self._reader = threading.Thread(
            target=self._thread_reader,
            args=(process, conn),
            name=f"engine-reader-{process.pid}",
            daemon=True,
        )
        self._reader.start()

    @property
    def reads_on(self) -> Literal["loop", "thread"]:
        """Who reads the worker pipe now: ``"loop"``, or ``"thread"`` (also mid-hand-over)."""
        with self._lock:
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
        with self._lock:
            if self._read_loop is not None:
                return
            self._read_loop = loop
            if self._conn is None or self._reading != "thread":
                return  # _spawn attaches the next worker's pipe to the loop
            self._handover = token = next(self._ids)
            self._reading = "handing"
        with contextlib.suppress(OSError):  # the worker died; _spawn attaches the next one
            self._send(Ping(token))

    def read_on_thread(self) -> None:
        """Give reading back to a reader thread (call on the reading loop before it stops)."""
        with self._lock:
            loop, self._read_loop = self._read_loop, None
            if loop is None:
                return
            if self._reading == "handing":
                self._reading = "thread"  # the thread ignores the Pong and reads on
            elif self._reading in ("attaching", "loop") and self._conn is not None:
                if self._reading == "loop":
                    loop.remove_reader(self._conn.fileno())
                self._start_thread(self._process, self._conn)  # a pending _attach backs off

    def _attach(self, loop: asyncio.AbstractEventLoop, process: Any, conn: Connection) -> None:
        """On ``loop``: start watching ``conn`` (scheduled by the thread or by _spawn).

        A stale call backs off: whenever the state is ``"attaching"``, an ``_attach`` for
        the current loop and pipe was scheduled after the last change of either.
        """
        with self._lock:
            if (
                self._reading != "attaching"
                or conn is not self._conn
                or self._read_loop is not loop
            ):
                return
            loop.add_reader(conn.fileno(), self._loop_reader, loop, process, conn)
            self._reading = "loop"

    def _detach_for_close(self, conn: Connection | None) -> None:
        """Stop the loop watching ``conn`` before it is closed (close() may run anywhere)."""
        with self._lock:
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
            if self._dispatch(events, None) and self._hand_over(process, conn):
                return  # the loop reads from here on
        self._on_worker_exit(process)

    def _hand_over(self, process: Any, conn: Connection) -> bool:
        """On the reader thread, at the hand-over Pong: schedule the loop's reader."""
        with self._lock:
            loop = self._read_loop
            if self._reading != "handing" or loop is None:
                return False
            self._reading = "attaching"
            try:
                loop.call_soon_threadsafe(self._attach, loop, process, conn)
            except RuntimeError:  # the loop closed meanwhile
                self._read_loop, self._reading = None, "thread"
                return False
            self._reader = None
            return True

    def _loop_reader(self, loop: asyncio.AbstractEventLoop, process: Any, conn: Connection) -> None:
        """On the reading loop, when the pipe is readable.

        ``recv`` may block the loop for the rest of a message, which the worker is already
        writing (only embeddings are large), never for the next engine step.
        """
        try:
            events: list[Event] = conn.recv()
        except (EOFError, OSError):
            with self._lock, contextlib.suppress(OSError):  # close() may have closed it
                loop.remove_reader(conn.fileno())
            with self._lock:
                if self._reading == "loop" and conn is self._conn:
                    self._reading = "thread"
            threading.Thread(
                target=self._on_worker_exit, args=(process,), name="engine-exit", daemon=True
            ).start()
            return
        except Exception:
            logger.exception("bad message from engine worker")
            return
        self._dispatch(events, loop)

    def _reap(self, process: Any) -> None:
        """Wait for a retired worker to exit (kill it after 10 s), then close its pipe."""
        process.join(10)
        if process.is_alive():
            logger.warning("retired engine worker %s did not exit; killing it", process.pid)
            process.kill()
            process.join(5)
        with self._lock:
            conn = self._retired.pop(process, None)
        self._detach_for_close(conn)
        if conn is not None:
            conn.close()

    def _on_worker_exit(self, process: Any) -> None:
        """The worker ``process`` exited (its pipe reported EOF); the restart policy decides
        what follows. Runs on the reader thread or a short-lived ``engine-exit`` thread."""
        raise NotImplementedError
