"""Fixtures for the tray app: real widgets (offscreen Qt on a small laptop screen), a real
engine on the tiny model.

One engine worker serves the whole desktop session (starting one costs a second or two);
each test gets its own Sidelight home, settings, controller and windows on top of it, and
``desktop`` reloads the demo model on the CPU if a previous test switched away.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

# Before any QApplication exists (pytest-qt creates it on first use). The offscreen screen
# is the laptop windows must fit: 1366x768 at 125 %, so 1093x614 logical pixels.
os.environ.setdefault(
    "QT_QPA_PLATFORM",
    f"offscreen:configfile={Path(__file__).with_name('laptop-screen.json')}",
)

from collections.abc import Callable, Iterator

import pytest
from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.autostart import XdgAutostart
from desktop.chat import ChatOptions
from desktop.gui_gc import collect_on_gui_thread
from engine.devices import DeviceInfo, discover_devices
from engine.models import DEMO_MODEL_ID, spec_from_path
from engine.resources import demo_model_path
from engine.runtime import Runtime, ServedEngine
from engine.settings import load_settings
from engine.supervisor.states import ERROR, READY
from engine.worker.messages import SamplingParams

GREEDY = ChatOptions(sampling=SamplingParams(temperature=0))
# A long reply that shows text all the way: sampled (seeded) and past the end-of-turn token.
LONG_REPLY = ChatOptions(
    max_tokens=1800, sampling=SamplingParams(temperature=1.0, seed=7, ignore_eos=True)
)


@pytest.fixture(scope="package", autouse=True)
def gui_thread_gc(qapp: QApplication) -> Iterator[None]:
    """As the app runs (desktop/gui_gc.py): Python's collector only on the GUI thread, so a
    window left in a cycle by one test is never freed on an engine or pool thread while Qt
    dispatches its timers (that segfaulted test_settings_dialog.py now and then)."""
    timer = collect_on_gui_thread()
    yield
    timer.stop()
    gc.enable()
    gc.collect()


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedEngine]:
    home = tmp_path_factory.mktemp("engine-home")
    # Every token its own delta: the worst case for the GUI thread, and what the
    # chunk-count checks expect (merging fast tokens has its own engine tests; so has
    # prompt lookup, which yields several tokens a step).
    env = {
        "SIDELIGHT_HOME": str(home),
        "SIDELIGHT_STREAM_INTERVAL_MS": "0",
        "SIDELIGHT_PROMPT_LOOKUP": "0",
    }
    settings = load_settings(env)
    settings.paths.ensure()
    # What the app runs on (one worker per loaded model and the default model's view),
    # built by the engine's front door; each DesktopApp's own runtime then borrows it.
    runtime = Runtime(settings)
    runtime.start()
    yield runtime.engine
    runtime.close()


@pytest.fixture(scope="session")
def cpu_devices() -> list[DeviceInfo]:
    """The devices OpenVINO really sees here (a CPU)."""
    return discover_devices()


def ensure_demo_on_cpu(engine: ServedEngine) -> None:
    status = engine.status()
    model = status.model.id if status.model else None
    if (status.state, model, status.device) == (READY, DEMO_MODEL_ID, "CPU"):
        return
    engine.default.load(spec_from_path(demo_model_path()), "CPU")
    status = engine.default.wait_for({READY, ERROR}, 120)
    assert status.state == READY, status.message


@pytest.fixture
def make_desktop(
    qtbot: QtBot,
    engine: ServedEngine,
    cpu_devices: list[DeviceInfo],
    sidelight_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[..., DesktopApp]]:
    """Build started DesktopApps over the shared engine: ``make_desktop(chat_options=...)``."""
    monkeypatch.setenv("SIDELIGHT_PORT", "0")  # a free port for each app's server
    # Each test has a fresh home, so the CPU self-tune would measure (seconds of CPU) in
    # every one; tests/desktop/test_startup_chores.py drives it.
    monkeypatch.setenv("SIDELIGHT_CPU_SELF_TUNE", "0")
    ensure_demo_on_cpu(engine)
    apps: list[DesktopApp] = []

    def make(
        *,
        chat_options: ChatOptions = GREEDY,
        devices: list[DeviceInfo] | None = None,
        hub_endpoint: str | None = None,
    ) -> DesktopApp:
        settings = load_settings()
        settings.paths.ensure()
        app = DesktopApp(
            settings,
            engine=engine,
            devices=devices if devices is not None else cpu_devices,
            autostart=XdgAutostart(tmp_path / "xdg-config" / "autostart"),
            chat_options=chat_options,
            hub_endpoint=hub_endpoint,
        )
        apps.append(app)
        app.start()
        qtbot.waitUntil(lambda: app.controller.server_url is not None, timeout=15000)
        qtbot.waitUntil(lambda: app.controller.status.state == READY, timeout=60000)
        return app

    yield make
    for app in apps:
        # A download a test left running would make closing the chat ask "Quit Sidelight?"
        # in a modal box nobody answers (a loaded machine finishes it later than the test).
        manager = app._models
        if manager is not None and manager.busy:
            manager.cancel_job()
            qtbot.waitUntil(lambda m=manager: not m.busy, timeout=30000)
        windows = (app._chat, app._models, app._requests, app._settings, app._welcome_dialog)
        for window in windows:
            if window is not None:
                window.close()
        app.shutdown()
        # Closed is not gone: a window left alive takes part in every later theme switch
        # (test_theme's took over 300 s in the whole suite, 18 s after two modules).
        for window in windows:
            if window is not None:
                window.deleteLater()
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


@pytest.fixture
def desktop(make_desktop: Callable[..., DesktopApp]) -> DesktopApp:
    return make_desktop()
