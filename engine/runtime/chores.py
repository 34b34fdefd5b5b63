"""Start-up chores, one policy for ``sidelight serve`` and the tray app.

Two chores may come before a new install serves well:

* **Moving an old store.** Models kept in the old place (the cache folder, which cleaners
  empty) move to the data folder (:mod:`engine.store.relocate`, atomic per model). The CLI
  waits for the move before serving; the tray moves in the background with progress and
  loads the last model as soon as it has moved. Both go through :meth:`StartupChores.move_store`.
* **The CPU self-tune** (:mod:`engine.cpu_tune`), once per CPU and OpenVINO version, on the
  built-in demo model. When it runs is :func:`tune_timing`'s one rule: with nobody waiting at
  a chat window (headless), *before* the first load, so the model loads with the tuned
  properties while requests for it wait (never 404); with a person at the window, *after*
  the first model is ready, so the first reply comes at once with OpenVINO's defaults and
  the tuned properties apply from the next load. Tuning while a model loads or a reply runs
  would skew the figures: the tray's tune gives up (:class:`TuneDisturbed`) when a reply
  ran meanwhile, and runs again at the next start.

Threading: the methods block (seconds for the tune, minutes for a large move): call them off
the GUI thread and off the event loop. ``disturbed`` and ``on_start`` run on the tune's
thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from engine import cpu_tune
from engine.models import ModelSpec
from engine.resources import demo_model_path
from engine.runtime.default_model import DefaultModel
from engine.settings import Settings
from engine.store.relocate import MoveProgress, relocate_at_start

logger = logging.getLogger(__name__)

TuneTiming = Literal["skip", "before_load", "after_ready"]
TUNE_FINISH_SECONDS = 120.0  # how long shutting down waits for a running self-tune


class TuneDisturbed(Exception):
    """A reply ran while the self-tune measured (or the app is quitting): its figures would
    mislead; it tunes at the next start."""


def tune_timing(settings: Settings, device: str, *, interactive: bool) -> TuneTiming:
    """When the self-tune runs at start (see the module docstring): never off the CPU or
    when turned off; before the first load headless; after the first ready with a window."""
    if not (device.upper().startswith("CPU") and settings.cpu.self_tune):
        return "skip"
    return "after_ready" if interactive else "before_load"


class StartupChores:
    """The start-up chores of one runtime (see the module docstring).

    Args:
        settings: the settings the runtime started with (paths, CPU options).
        default: the default model's view (a tune before the load holds its requests).
        model_dir: the model the tune measures (the built-in demo model).
    """

    def __init__(
        self, settings: Settings, default: DefaultModel, *, model_dir: Path | None = None
    ) -> None:
        self._settings = settings
        self._default = default
        self._model_dir = model_dir
        self._machine_key: str | None = None

    def move_store(
        self,
        report: Callable[[MoveProgress], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> OSError | None:
        """Finish moving a store left in the old place (blocks; see
        :func:`engine.store.relocate.relocate_at_start`): the error that stopped it, or
        None when it finished, was cancelled or there was nothing to move."""
        return relocate_at_start(self._settings.paths, report=report, cancel=cancel)

    def tune(
        self,
        *,
        on_start: Callable[[], None] | None = None,
        disturbed: Callable[[], str | None] | None = None,
    ) -> cpu_tune.TuneResult | None:
        """Run the CPU self-tune unless this machine's choice is cached (None then; blocks
        seconds).

        ``on_start`` is called once measuring begins; ``disturbed`` is asked before and
        after each measurement and gives up the tune with its answer when it has one.

        Raises:
            TuneDisturbed: ``disturbed`` said why the figures would mislead.
            Exception: whatever the measurement raised (OpenVINO's errors): the caller
                keeps the configured properties.
        """
        if self._machine_key is None:
            self._machine_key = cpu_tune.machine_key()
        wrap = _guarded(disturbed) if disturbed is not None else None
        return cpu_tune.tune_unless_cached(
            self._settings.cpu,
            self._settings.paths.cache_dir,
            self._model_dir or demo_model_path(),
            key=self._machine_key,
            on_start=on_start,
            wrap=wrap,
        )

    def load_at_start(
        self, spec: ModelSpec, device: str, stop: threading.Event
    ) -> threading.Thread | None:
        """Load ``spec`` headless, after the self-tune when :func:`tune_timing` says so.

        Returns the tune's thread: shutting down must :func:`finish_tune` it, since the
        process aborts when it exits while that thread is inside OpenVINO. The default
        model is announced as loading before the tune starts, so a request for it meanwhile
        waits for the load (or gets 503 model_loading), never 404. A load of another model
        meanwhile wins: the tune's thread then loads nothing.
        """
        if tune_timing(self._settings, device, interactive=False) != "before_load":
            self._default.load(spec, device)
            return None
        self._default.expect_load(spec, device, f"tuning the CPU before loading {spec.id}")

        def run() -> None:
            try:
                self.tune()
            except Exception:  # requests wait for this load: it must come whatever happened
                logger.exception(
                    "CPU self-tune failed; loading %s with default properties", spec.id
                )
            if stop.is_set():
                return
            if self._default.spec != spec:
                logger.info(
                    "CPU self-tune done; %s is not loaded: another model was asked for", spec.id
                )
                return
            self._default.load(spec, device)

        thread = threading.Thread(target=run, name="cpu-self-tune", daemon=True)
        thread.start()
        return thread


def finish_tune(tuner: threading.Thread | None) -> None:
    """Let a running self-tune end its measurement (bounded) before the process exits."""
    if tuner is not None and tuner.is_alive():
        logger.info("waiting for the CPU self-tune to finish its measurement")
        tuner.join(TUNE_FINISH_SECONDS)
        if tuner.is_alive():
            logger.warning("the CPU self-tune did not finish in %.0f s", TUNE_FINISH_SECONDS)


def _guarded(disturbed: Callable[[], str | None]) -> Callable[[cpu_tune.Measure], cpu_tune.Measure]:
    """Wrap each measurement so the tune gives up once ``disturbed`` has a reason."""

    def wrap(measure: cpu_tune.Measure) -> cpu_tune.Measure:
        def measured(candidate: dict[str, object]) -> float:
            reason = disturbed()
            if reason is not None:
                raise TuneDisturbed(reason)
            speed = measure(candidate)
            reason = disturbed()
            if reason is not None:
                raise TuneDisturbed(reason)
            return speed

        return measured

    return wrap
