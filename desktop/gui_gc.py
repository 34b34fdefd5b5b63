"""Python's cyclic garbage collector runs on the GUI thread only.

Why: the collector runs on whichever thread happens to allocate when a generation fills, and
the tray app has many threads (engine readers, the job pool, uvicorn). A Qt object left in a
reference cycle (a closed window, a dialog, a controller with its timers) that the collector
frees on one of them is destroyed there while the GUI thread delivers its timer events: a
segfault in ``QTimerInfoList::activateTimers`` (seen in the desktop tests, the GUI thread
dispatching a timer of an object just freed elsewhere). PyQt's and PySide's advice: switch
automatic collection off and collect from a GUI-thread timer instead.

Threading: :func:`collect_on_gui_thread` on the GUI thread, once, after the QApplication
exists.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

INTERVAL_MS = 500  # young generations every half second; a full pass when they say so


def collect_on_gui_thread(parent: QObject | None = None) -> QTimer:
    """Disable automatic collection and collect on a GUI-thread timer; returns the timer
    (stop it and call :func:`gc.enable` to undo)."""
    gc.disable()
    timer = QTimer(parent)
    timer.setInterval(INTERVAL_MS)
    timer.timeout.connect(_collect)
    timer.start()
    return timer


def _collect() -> None:
    # What the automatic collector would do: a generation is collected once its count
    # passes its threshold (collecting an older one collects the younger ones too).
    counts = gc.get_count()
    thresholds = gc.get_threshold()
    for generation in (2, 1, 0):
        if counts[generation] > thresholds[generation]:
            gc.collect(generation)
            return
