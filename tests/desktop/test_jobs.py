"""The desktop's job helper on a real task manager and real pool threads: the outcome on the
GUI thread, expected failures as messages, unexpected ones logged with their traceback and
still reported, progress on the GUI thread in order and never after the outcome."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

import pytest
from PySide6.QtCore import QObject, Signal
from pytestqt.qtbot import QtBot

from desktop.jobs import Job, unexpected_text
from desktop.taskman import TaskManager

JOBS_LOGGER = "desktop.jobs"


@pytest.fixture
def tasks(qtbot: QtBot) -> Iterator[TaskManager]:
    manager = TaskManager()
    yield manager
    manager.shutdown()


def on_gui_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def drain(qtbot: QtBot, tasks: TaskManager) -> None:
    """Wait until everything queued for the GUI thread so far has run (the queue is FIFO)."""
    drained = threading.Event()
    tasks.run_on_main(drained.set)
    qtbot.waitUntil(drained.is_set)


class Notices(QObject):
    """A stand-in for ``Controller.notify``: a real signal the tests wait on."""

    notify = Signal(str, str, bool)

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str, bool]] = []
        self.notify.connect(lambda *notice: self.seen.append(notice))


def test_the_op_runs_off_the_gui_thread_and_success_on_it(qtbot: QtBot, tasks: TaskManager) -> None:
    threads: dict[str, bool] = {}
    results: list[int] = []

    def op() -> int:
        threads["op"] = on_gui_thread()
        return 42

    def success(value: int) -> None:
        threads["success"] = on_gui_thread()
        results.append(value)

    future = Job(tasks, op, what="answer", success=success).run()
    qtbot.waitUntil(lambda: results == [42])
    assert threads == {"op": False, "success": True}
    assert future.result() == 42


def test_an_expected_failure_is_its_message(
    qtbot: QtBot, tasks: TaskManager, caplog: pytest.LogCaptureFixture
) -> None:
    notices = Notices()

    def op() -> None:
        raise OSError("No space left on device")

    caplog.set_level(logging.DEBUG, logger=JOBS_LOGGER)
    with qtbot.waitSignal(notices.notify) as blocker:
        Job(tasks, op, what="move the models", notify=notices.notify.emit).run()
    assert blocker.args == ["Could not move the models", "No space left on device", True]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r for r in caplog.records if r.exc_info]


def test_an_expected_failure_without_notify_is_a_warning(
    qtbot: QtBot, tasks: TaskManager, caplog: pytest.LogCaptureFixture
) -> None:
    def op() -> None:
        raise FileNotFoundError("catalog.json is missing")

    caplog.set_level(logging.WARNING, logger=JOBS_LOGGER)
    Job(tasks, op, what="read the catalog").run()
    qtbot.waitUntil(lambda: bool(caplog.records))
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "could not read the catalog: catalog.json is missing"
    assert record.exc_info is None


def test_an_unexpected_failure_is_logged_with_its_traceback_and_still_reported(
    qtbot: QtBot, tasks: TaskManager, caplog: pytest.LogCaptureFixture
) -> None:
    notices = Notices()
    bug = KeyError("size")

    def op() -> None:
        raise bug

    caplog.set_level(logging.ERROR, logger=JOBS_LOGGER)
    with qtbot.waitSignal(notices.notify) as blocker:
        Job(tasks, op, what="size the repo", notify=notices.notify.emit).run()
    assert blocker.args == ["Could not size the repo", unexpected_text(bug), True]
    assert unexpected_text(bug) == (
        "Something unexpected went wrong: 'size' (the log has the details)."
    )
    (record,) = caplog.records
    assert record.getMessage() == "could not size the repo"
    assert record.exc_info is not None and record.exc_info[1] is bug
    assert "raise bug" in caplog.text  # the traceback names the line that raised


def test_a_failure_callback_gets_the_exception_on_the_gui_thread_instead_of_the_default(
    qtbot: QtBot, tasks: TaskManager, caplog: pytest.LogCaptureFixture
) -> None:
    notices = Notices()
    failures: list[tuple[Exception, bool]] = []
    successes: list[None] = []

    def expected_op() -> None:
        raise TimeoutError("the hub did not answer")

    def buggy_op() -> None:
        raise ZeroDivisionError("division by zero")

    def failure(exc: Exception) -> None:
        failures.append((exc, on_gui_thread()))

    caplog.set_level(logging.ERROR, logger=JOBS_LOGGER)
    for op in (expected_op, buggy_op):
        Job(
            tasks,
            op,
            what="search the hub",
            success=successes.append,
            failure=failure,
            notify=notices.notify.emit,
        ).run()
    qtbot.waitUntil(lambda: len(failures) == 2)
    by_type = {type(exc): gui for exc, gui in failures}
    assert by_type == {TimeoutError: True, ZeroDivisionError: True}
    assert successes == [] and notices.seen == []
    # Only the bug was logged (with its traceback) before the callback saw it.
    assert [(r.getMessage(), r.exc_info is not None) for r in caplog.records] == [
        ("could not search the hub", True)
    ]


def test_the_expected_tuple_decides_what_is_a_bug(
    qtbot: QtBot, tasks: TaskManager, caplog: pytest.LogCaptureFixture
) -> None:
    notices = Notices()

    def op() -> None:
        raise OSError("disk gone")

    caplog.set_level(logging.ERROR, logger=JOBS_LOGGER)
    with qtbot.waitSignal(notices.notify) as blocker:
        Job(tasks, op, what="detect", expected=(), notify=notices.notify.emit).run()
    assert blocker.args[1] == unexpected_text(OSError("disk gone"))
    assert [r.getMessage() for r in caplog.records] == ["could not detect"]


def test_progress_arrives_on_the_gui_thread_in_order_before_the_outcome(
    qtbot: QtBot, tasks: TaskManager
) -> None:
    events: list[tuple[str, object, bool]] = []
    go_on = threading.Event()

    def op(report: Callable[[int], None]) -> str:
        report(1)
        assert go_on.wait(10)  # the GUI thread saw the first report while the op runs
        report(2)
        report(3)
        return "done"

    def on_progress(step: int) -> None:
        events.append(("progress", step, on_gui_thread()))

    def success(value: str) -> None:
        events.append(("success", value, on_gui_thread()))

    Job.with_progress(tasks, op, on_progress, what="count", success=success).run()
    qtbot.waitUntil(lambda: events == [("progress", 1, True)])
    go_on.set()
    qtbot.waitUntil(lambda: len(events) == 4)
    assert events == [
        ("progress", 1, True),
        ("progress", 2, True),
        ("progress", 3, True),
        ("success", "done", True),
    ]


def test_no_progress_after_the_outcome(qtbot: QtBot, tasks: TaskManager) -> None:
    kept: list[Callable[[str], None]] = []
    seen: list[str] = []
    failures: list[Exception] = []

    def op(report: Callable[[str], None]) -> None:
        kept.append(report)  # a misbehaving op keeps its report past its end
        report("early")
        raise OSError("stopped")

    Job.with_progress(tasks, op, seen.append, what="copy", failure=failures.append).run()
    qtbot.waitUntil(lambda: len(failures) == 1)
    assert seen == ["early"]
    late = threading.Thread(target=kept[0], args=("late",))
    late.start()
    late.join()
    drain(qtbot, tasks)
    assert seen == ["early"]


def test_a_job_runs_once(qtbot: QtBot, tasks: TaskManager) -> None:
    results: list[int] = []
    job = Job(tasks, lambda: 1, what="count once", success=results.append)
    job.run()
    with pytest.raises(RuntimeError, match="count once"):
        job.run()
    qtbot.waitUntil(lambda: results == [1])


def test_an_error_in_success_is_not_the_ops_failure(
    qtbot: QtBot, tasks: TaskManager, caplog: pytest.LogCaptureFixture
) -> None:
    failures: list[Exception] = []

    def success(value: int) -> None:
        raise ValueError(f"bad {value}")

    caplog.set_level(logging.ERROR, logger="desktop.taskman")
    Job(tasks, lambda: 7, what="show", success=success, failure=failures.append).run()
    qtbot.waitUntil(lambda: bool(caplog.records))
    assert failures == []
    assert caplog.records[0].getMessage() == "a GUI-thread callback failed"


def test_a_job_dropped_at_shutdown_calls_nothing(
    qtbot: QtBot, caplog: pytest.LogCaptureFixture
) -> None:
    tasks = TaskManager(max_workers=1)
    release = threading.Event()
    first: list[bool] = []
    dropped: list[object] = []
    Job(tasks, lambda: release.wait(10), what="hold the pool", success=first.append).run()
    future = Job(
        tasks, lambda: 1, what="never run", success=dropped.append, failure=dropped.append
    ).run()
    caplog.set_level(logging.WARNING)
    tasks.shutdown()  # the second job is still queued behind the first: it is dropped
    assert future.cancelled()
    release.set()
    qtbot.waitUntil(lambda: first == [True])
    drain(qtbot, tasks)
    assert dropped == []
    assert not caplog.records


def test_a_report_after_qt_deleted_the_manager_is_dropped(qtbot: QtBot) -> None:
    """Issue 28, defect 12: quitting mid-download logged ``RuntimeError: Signal source has
    been deleted`` from the download's thread, reporting progress after the app's objects
    were gone. The late report is dropped now, from any thread, without an error."""
    import shiboken6

    tasks = TaskManager(max_workers=1)
    ran: list[int] = []
    failures: list[BaseException] = []
    tasks.shutdown()
    shiboken6.delete(tasks)  # what Qt does to the app's objects as it quits

    def late_report() -> None:  # the download's thread, still running
        try:
            tasks.run_on_main(lambda: ran.append(1))
            tasks.run_on_main(lambda: ran.append(2))
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=late_report)
    thread.start()
    thread.join(30)
    assert failures == [] and ran == []
