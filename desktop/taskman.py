"""The one place that moves work between threads (after anki's ``aqt/taskman.py``).

* :meth:`TaskManager.run_in_background` runs a blocking function on a thread pool and hands
  its future to a callback on the GUI thread.
* :meth:`TaskManager.run_on_main` queues a closure for the GUI thread; any thread may call it.
* :meth:`TaskManager.stream` runs an async generator on one asyncio loop thread (where the
  engine's request streams live) and emits each item on the GUI thread through
  :attr:`StreamWorker.yielded` (superqt's generator-worker shape).

Widgets are touched on the GUI thread alone: background functions must not call any UI
routine, as that may crash Qt.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from PySide6.QtCore import QObject, Qt, Signal

logger = logging.getLogger(__name__)

T = TypeVar("T")
Closure = Callable[[], None]


class TaskManager(QObject):
    """Thread pool, GUI-thread queue and asyncio loop thread for the desktop app.

    Threading: create it on the GUI thread. ``run_on_main`` is safe from any thread; the
    other methods are called on the GUI thread.
    """

    _closures_pending = Signal()

    def __init__(self, parent: QObject | None = None, *, max_workers: int = 4) -> None:
        super().__init__(parent)
        self._executor = ThreadPoolExecutor(max_workers, thread_name_prefix="sidelight-bg")
        self._closures: list[Closure] = []
        self._closed = False  # Qt deleted this object: late callbacks are dropped
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        # Queued explicitly: the signal is emitted from worker threads and the slot must run
        # on the thread this object lives on (the GUI thread).
        self._closures_pending.connect(self._run_closures, Qt.ConnectionType.QueuedConnection)

    def run_in_background(
        self, fn: Callable[[], T], on_done: Callable[[Future[T]], None] | None = None
    ) -> Future[T]:
        """Run ``fn`` on a worker thread; then call ``on_done(future)`` on the GUI thread.

        Be careful not to call any UI routines in ``fn``, as that may crash Qt. ``on_done``
        reads the result with ``future.result()``, which re-raises what ``fn`` raised;
        :class:`desktop.jobs.Job` does that reading (and the error reporting) for you.
        """
        future = self._executor.submit(fn)
        if on_done is not None:
            future.add_done_callback(lambda f: self.run_on_main(lambda: on_done(f)))
        return future

    def run_on_main(self, closure: Closure) -> None:
        """Call ``closure`` on the GUI thread soon (safe from any thread). Once Qt deleted
        this object (the app quit while a download still reported progress: it logged
        ``RuntimeError: Signal source has been deleted``), the closure is dropped: there is
        no GUI left to run it on."""
        with self._lock:
            if self._closed:
                return
            first = not self._closures
            self._closures.append(closure)
        if first:  # one queued signal drains everything that piles up meanwhile
            try:
                self._closures_pending.emit()
            except RuntimeError:  # "Signal source has been deleted": Qt is gone
                with self._lock:
                    self._closed = True
                    self._closures.clear()
                logger.debug("the GUI is gone: a late callback was dropped")

    def _run_closures(self) -> None:
        with self._lock:
            closures, self._closures = self._closures, []
        for closure in closures:
            try:
                closure()
            except Exception:
                logger.exception("a GUI-thread callback failed")

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The asyncio loop thread (started on first use) that runs chat streams."""
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="sidelight-asyncio", daemon=True
            )
            thread.start()
            self._loop, self._loop_thread = loop, thread
        return self._loop

    def stream(self, source: Callable[[], AsyncIterator[T]]) -> StreamWorker:
        """A worker that runs ``source()`` on the loop thread once started."""
        return StreamWorker(self, source)

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop the loop thread and the pool (pending background work is dropped)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._loop_thread is not None:
                self._loop_thread.join(timeout)
            self._loop.close()
            self._loop = self._loop_thread = None
        self._executor.shutdown(wait=False, cancel_futures=True)


class StreamWorker(QObject):
    """Runs one async generator on the task manager's loop and reports on the GUI thread.

    Signals (all delivered on the GUI thread): ``yielded(item)`` per item, ``errored(exc)``
    if the generator raised, then always ``done()``.

    Threading: create, start and cancel on the GUI thread.
    """

    yielded = Signal(object)
    errored = Signal(object)
    done = Signal()

    def __init__(self, tasks: TaskManager, source: Callable[[], AsyncIterator[Any]]) -> None:
        super().__init__()  # the owner keeps a reference for as long as it cares
        self._tasks = tasks
        self._source = source
        self._future: Future[None] | None = None

    @property
    def running(self) -> bool:
        return self._future is not None and not self._future.done()

    def start(self) -> None:
        self._future = asyncio.run_coroutine_threadsafe(self._run(), self._tasks.loop)

    def cancel(self) -> None:
        """Cancel the coroutine; leaving the generator early cancels its engine request."""
        if self._future is not None:
            self._future.cancel()

    async def _run(self) -> None:
        post = self._tasks.run_on_main
        try:
            async for item in self._source():
                post(partial(self.yielded.emit, item))
        except asyncio.CancelledError:
            post(self.done.emit)
            raise
        except Exception as exc:
            logger.debug("stream worker failed", exc_info=True)
            post(partial(self.errored.emit, exc))
        post(self.done.emit)
