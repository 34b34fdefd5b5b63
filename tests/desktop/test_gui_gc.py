"""Python's collector runs on the GUI thread only (desktop/gui_gc.py), as the app runs it.

Before, a window left in a reference cycle could be freed by the collector on any thread
that happened to allocate; freed on a pool thread while the GUI thread dispatched its
timers, it segfaulted in ``QTimerInfoList::activateTimers`` (test_settings_dialog.py, about
one run in two on this machine).
"""

from __future__ import annotations

import gc
import threading
import weakref

from PySide6.QtCore import QObject, QTimer
from pytestqt.qtbot import QtBot


class _Holder(QObject):
    """A Qt object with a running timer, kept alive only by a reference cycle."""

    def __init__(self) -> None:
        super().__init__()
        self.timer = QTimer(self)
        self.timer.start(5)
        self.me = self  # the cycle


def test_a_cycle_with_a_qt_object_is_collected_on_the_gui_thread(qtbot: QtBot) -> None:
    assert not gc.isenabled()  # the package's fixture installed the GUI-thread collector
    freed_on: list[str] = []
    holder = _Holder()
    ref = weakref.ref(holder, lambda _: freed_on.append(threading.current_thread().name))
    del holder

    def allocate_elsewhere() -> None:  # what used to trigger a collection off the GUI thread
        for _ in range(50_000):
            [[]]  # noqa: B018

    worker = threading.Thread(target=allocate_elsewhere)
    worker.start()
    worker.join()
    assert ref() is not None  # nobody collected it on the worker
    thresholds = gc.get_threshold()
    gc.set_threshold(1, 1, 1)  # so the next tick collects every generation
    try:
        qtbot.waitUntil(lambda: ref() is None, timeout=5000)
    finally:
        gc.set_threshold(*thresholds)
    assert freed_on == [threading.main_thread().name]
