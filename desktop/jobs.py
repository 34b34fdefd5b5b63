"""One background job: an op off the GUI thread, its outcome on it (anki's ``QueryOp``).

Every background call in the desktop used to wrap :meth:`TaskManager.run_in_background`
in its own ``future.result()`` try/except. A :class:`Job` does that once:

* ``op()`` runs on the task manager's pool; then ``success(result)`` or ``failure(exc)``
  runs on the GUI thread.
* ``what`` says what the job does, as a verb phrase ("download Qwen3 0.6B", "check the
  conversion tools"); messages read "Could not <what>".
* ``expected`` names the exceptions that are ordinary outcomes (a full disk, an unreachable
  hub): their own text is the message. Anything else is a bug: it is logged with its
  traceback ("could not <what>") before ``failure`` sees it, and still reported, never
  swallowed.
* Without ``failure`` the job reports the failure itself: ``notify("Could not <what>", text,
  True)`` when given a ``notify`` (the shape of ``Controller.notify.emit``), else a warning in
  the log. ``text`` is the exception's own for an expected one, :func:`unexpected_text`
  otherwise.
* :meth:`Job.with_progress` hands the op a ``report`` callable: each report reaches
  ``on_progress`` on the GUI thread, in order, before the outcome; none arrives after it.

Threading: build and run a job on the GUI thread. The op runs on a pool thread and must
never touch a widget (or any Qt object): it takes its inputs from its closure (copy them on
the GUI thread first) and gives back a value. ``success``, ``failure`` and ``on_progress``
run on the GUI thread. Qt is reached only through :class:`~desktop.taskman.TaskManager`.
A job dropped unrun by :meth:`TaskManager.shutdown` calls neither callback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

from desktop.taskman import TaskManager

logger = logging.getLogger(__name__)

T = TypeVar("T")
P = TypeVar("P")

Notify = Callable[[str, str, bool], None]
"""``notify(title, message, is_error)``: how a job's default failure tells the person."""


def unexpected_text(exc: BaseException) -> str:
    """The message for a failure nobody expected (its traceback is in the log)."""
    return f"Something unexpected went wrong: {exc} (the log has the details)."


class Job(Generic[T]):
    """``op`` on a pool thread; ``success`` or ``failure`` on the GUI thread. Run it once.

    Threading: create and :meth:`run` on the GUI thread; ``op`` must never touch a widget.
    """

    def __init__(
        self,
        tasks: TaskManager,
        op: Callable[[], T],
        *,
        what: str,
        success: Callable[[T], None] | None = None,
        failure: Callable[[Exception], None] | None = None,
        expected: tuple[type[Exception], ...] = (OSError,),
        notify: Notify | None = None,
    ) -> None:
        """Args:
        op: the blocking work (pool thread: no widgets, no Qt).
        what: what the job does, a verb phrase for "Could not <what>".
        success: gets ``op``'s result (GUI thread); ``None``: nothing to do with it.
        failure: gets what ``op`` raised (GUI thread), after an unexpected one was logged
            with its traceback; ``None``: the default report (see the module docstring).
        expected: the exceptions that are ordinary outcomes, not bugs.
        notify: where the default failure goes (``None``: the log).
        """
        self.what = what
        self._tasks = tasks
        self._op = op
        self._success = success
        self._failure = failure
        self._expected = expected
        self._notify = notify
        self._reporter: _Reporter[Any] | None = None
        self._future: Future[T] | None = None

    @staticmethod
    def with_progress(
        tasks: TaskManager,
        op: Callable[[Callable[[P], None]], T],
        on_progress: Callable[[P], None],
        *,
        what: str,
        success: Callable[[T], None] | None = None,
        failure: Callable[[Exception], None] | None = None,
        expected: tuple[type[Exception], ...] = (OSError,),
        notify: Notify | None = None,
    ) -> Job[T]:
        """A job whose ``op(report)`` reports progress: ``report(p)`` may be called from any
        thread; ``on_progress(p)`` runs on the GUI thread, every report before the outcome,
        none after it. The other arguments are :class:`Job`'s."""
        reporter: _Reporter[P] = _Reporter(tasks, on_progress)
        job = Job(
            tasks,
            lambda: op(reporter),
            what=what,
            success=success,
            failure=failure,
            expected=expected,
            notify=notify,
        )
        job._reporter = reporter
        return job

    def run(self) -> Future[T]:
        """Start ``op`` on the pool; returns its future (the callbacks need no waiting)."""
        if self._future is not None:
            raise RuntimeError(f"the job to {self.what} already ran")
        self._future = self._tasks.run_in_background(self._op, self._done)
        return self._future

    def _done(self, future: Future[T]) -> None:  # GUI thread
        if self._reporter is not None:
            self._reporter.close()  # reports were queued before this: they have run
        if future.cancelled():
            logger.debug("the job to %s was dropped before it ran", self.what)
            return
        try:
            result = future.result()
        except Exception as exc:
            self._failed(exc)
            return
        if self._success is not None:
            self._success(result)  # its own errors are not the op's failure

    def _failed(self, exc: Exception) -> None:
        expected = isinstance(exc, self._expected)
        if expected:
            logger.debug("could not %s: %s", self.what, exc)
        else:
            logger.error("could not %s", self.what, exc_info=exc)
        if self._failure is not None:
            self._failure(exc)
            return
        text = str(exc) if expected else unexpected_text(exc)
        if self._notify is not None:
            self._notify(f"Could not {self.what}", text, True)
        elif expected:  # an unexpected one is in the log already
            logger.warning("could not %s: %s", self.what, text)


class _Reporter(Generic[P]):
    """The op's ``report``: hops each report to ``on_progress`` on the GUI thread.

    Threading: call it from any thread; ``close`` and delivery happen on the GUI thread,
    so ``_open`` needs no lock.
    """

    def __init__(self, tasks: TaskManager, on_progress: Callable[[P], None]) -> None:
        self._tasks = tasks
        self._on_progress = on_progress
        self._open = True

    def __call__(self, progress: P) -> None:
        self._tasks.run_on_main(lambda: self._deliver(progress))

    def close(self) -> None:
        self._open = False

    def _deliver(self, progress: P) -> None:
        if self._open:  # a late report (the op kept ``report`` past its end) is dropped
            self._on_progress(progress)
