"""The tray says why a model went away and which model is loading, on the real scheduler.

A second chat model (the tiny code model) is loaded beside the demo model by the session's
real engine. While its worker loads it, the worker is stopped with SIGSTOP (as a debugger
would) so the "loading" state lasts until the test has looked; then it is let go with
SIGCONT. The model then leaves memory with a request's ``keep_alive 0``: the tray notifies
once, its tooltip and its "In memory" submenu say why.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.tray import TrayMenu, _shorten, status_text
from engine.models import DEMO_MODEL_ID, spec_from_path
from engine.supervisor.pressure import PressureWatch, SystemReading
from engine.supervisor.scheduler import Scheduler
from engine.supervisor.unloads import UnloadEvent
from tests.conftest import TINY_CODER

CODER = "tiny-coder"


def _menu_texts(menu: TrayMenu) -> dict[str, str]:
    """Each entry's text by its data; a model unloaded twice (a retried load in
    :func:`_start_stopped_load`) keeps its newest entry, which the menu lists first."""
    menu.aboutToShow.emit()  # what opening it does
    texts: dict[str, str] = {}
    for action in menu.loaded_menu.actions():
        if action.data():
            texts.setdefault(str(action.data()), action.text())
    return texts


def _start_stopped_load(engine: Scheduler) -> tuple[threading.Thread, int]:
    """Start loading the code model on a thread and stop its worker while it loads (a
    tiny model loads in under a second: if it finished first, unload it and try again)."""
    spec = spec_from_path(TINY_CODER, model_id=CODER)
    for _ in range(10):
        thread = threading.Thread(target=engine.acquire, args=(spec, "CPU", 120), daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and thread.is_alive():
            held = {m.id: m for m in engine.loaded()}.get(CODER)
            if held is not None and held.state == "loading" and held.worker_pid is not None:
                os.kill(held.worker_pid, signal.SIGSTOP)
                if {m.id: m for m in engine.loaded()}[CODER].state == "loading":
                    return thread, held.worker_pid
                os.kill(held.worker_pid, signal.SIGCONT)  # it had just finished
                break
            time.sleep(0.005)
        thread.join(120)
        engine.unload(CODER)
    raise AssertionError("never caught the code model while it loaded")


def test_tray_shows_a_loading_model_and_says_why_one_went_away(
    qtbot: QtBot, desktop: DesktopApp, sidelight_home: Path
) -> None:
    controller, tray = desktop.controller, desktop.tray
    engine = controller.runtime.scheduler
    menu = tray.menu

    thread, pid = _start_stopped_load(engine)
    try:
        qtbot.waitUntil(lambda: CODER in controller.loading_models, timeout=10000)
        assert f"loading {CODER}…" in status_text(controller)
        assert f"loading {CODER}…" in tray.toolTip()
        texts = _menu_texts(menu)
        assert texts[f"unload:{CODER}"] == f"Loading {CODER}…  (CPU)"
    finally:
        os.kill(pid, signal.SIGCONT)
    thread.join(120)
    qtbot.waitUntil(lambda: CODER not in controller.loading_models, timeout=10000)
    assert _menu_texts(menu)[f"unload:{CODER}"].startswith(f"Unload {CODER}  (")

    client = engine.running(CODER)
    assert client is not None
    before = len(controller.unloads)
    with qtbot.waitSignal(controller.model_unloaded, timeout=30000) as signal_:
        client.set_keep_alive(0)  # what an Ollama request with keep_alive 0 does
    event = signal_.args[0]
    assert isinstance(event, UnloadEvent)
    assert (event.model_id, event.reason) == (CODER, "keep_alive")
    assert len(controller.unloads) == min(before + 1, 5) and controller.unloads[-1] == event
    text = f"{CODER} was unloaded: keep_alive 0"
    assert controller.last_notification == ("Model unloaded", text, False)
    qtbot.waitUntil(lambda: CODER not in {m.id for m in controller.loaded_models()})
    assert text in tray.toolTip()
    texts = _menu_texts(menu)
    assert f"unload:{CODER}" not in texts
    assert texts[f"gone:{CODER}"].endswith(f"  {text}")
    assert texts[f"gone:{CODER}"][:5] == time.strftime("%H:%M", time.localtime(event.at))

    # Loaded again beside the default model: the tooltip no longer says it went away.
    engine.acquire(spec_from_path(TINY_CODER, model_id=CODER), "CPU", 120)
    assert CODER in {m.id for m in controller.loaded_models() if m.state == "ready"}
    tray.refresh()
    assert text not in tray.toolTip()


def test_tray_says_the_default_model_left_under_memory_pressure(
    qtbot: QtBot, desktop: DesktopApp
) -> None:
    """Memory pressure is injected as a reading (real pressure cannot be produced here);
    the unloads are real: the session's other models first, then the default one."""
    controller, tray = desktop.controller, desktop.tray
    engine = controller.runtime.scheduler
    low = SystemReading(available_mb=100, total_mb=16384, on_battery=False)
    watch = PressureWatch(engine, controller.settings, read=lambda: low)
    gone: list[str] = []
    while DEMO_MODEL_ID not in gone:
        unloaded = watch.check()
        assert unloaded, "nothing idle left to unload"
        gone += unloaded
    assert gone[-1] == DEMO_MODEL_ID  # the default model went last
    qtbot.waitUntil(lambda: controller.status.state == "idle", timeout=30000)
    qtbot.waitUntil(lambda: controller.unloads[-1].model_id == DEMO_MODEL_ID, timeout=30000)
    event = controller.unloads[-1]
    assert event.reason == "memory_pressure"
    why = "100 MB of memory available, below 819 MB (memory_pressure_mb)"
    assert status_text(controller) == _shorten(f"{DEMO_MODEL_ID} was unloaded ({why})")
    title, text, is_error = controller.last_notification or ("", "", True)
    assert (title, is_error) == ("Model unloaded", False)
    assert text == f"{DEMO_MODEL_ID} was unloaded: the computer is low on memory ({why})"
    assert _shorten(text) in tray.toolTip()
