"""The chat's dictation: hold *Dictate* (or click it once to start and once to stop), speak,
and the words land in the message box, editable before sending.

The recording is transcribed by the installed speech recogniser through the transcription
endpoint's engine path (:func:`desktop.speech.dictate`); a level meter and the seconds
recorded show while it listens, and Esc (or :meth:`DictationControl.cancel`) drops the
recording or the transcription in progress. With no speech recogniser installed, or no
audio on the system, the button looks greyed out and says why; pressing it anyway brings
the notice that offers the catalog's Whisper (``unavailable``).

Threading: GUI thread only; the transcription runs on the task manager's asyncio loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final, Literal

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QPushButton, QWidget

from desktop.audio_io import Microphone, unavailable_reason
from desktop.chat import error_text
from desktop.speech import DICTATION_PICK, Samples, dictate
from desktop.taskman import StreamWorker, TaskManager
from engine.audio.decode import AudioError
from engine.audio.windows import is_silent
from engine.runtime import ServedEngine
from engine.server.pipeline import Pipeline

logger = logging.getLogger(__name__)

DictationState = Literal["idle", "recording", "transcribing"]
HOLD_SECONDS: Final = 0.4  # a press longer than this is hold-to-talk; shorter toggles
_LABELS: Final[dict[DictationState, str]] = {
    "idle": "Dictate",
    "recording": "Stop",
    "transcribing": "Transcribing…",
}


class DictationControl(QWidget):
    """The *Dictate* button with its level meter.

    Signals: ``transcribed(str)`` the words heard (never empty); ``problem(str)`` why a
    recording or its transcription failed, or heard nothing; ``unavailable(str)`` the
    person pressed the button while dictation cannot work (the reason).
    """

    transcribed = Signal(str)
    problem = Signal(str)
    unavailable = Signal(str)

    def __init__(
        self,
        tasks: TaskManager,
        pipeline: Callable[[], Pipeline],
        engine: Callable[[], ServedEngine],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._tasks = tasks
        self._pipeline = pipeline
        self._engine = engine
        self.state: DictationState = "idle"
        self.model: str | None = None
        self.reason: str | None = "no speech recognition model is installed"
        self._pressed_at: float | None = None
        self._toggled = False  # a short click started it: the next click stops it
        self._worker: StreamWorker | None = None
        self.last_recording: Samples | None = None  # what was sent last (tests read it)
        self.microphone = Microphone(self)
        self.microphone.level.connect(self._on_level)
        self.microphone.failed.connect(self._on_failed)
        self.microphone.full.connect(self.finish)

        self.button = QPushButton(_LABELS["idle"])
        self.button.setAutoDefault(False)
        self.button.pressed.connect(self._on_pressed)
        self.button.released.connect(self._on_released)
        self.meter = QProgressBar()
        self.meter.setRange(0, 100)
        self.meter.setTextVisible(False)
        self.meter.setFixedHeight(6)
        self.meter.setFixedWidth(48)
        self.meter.setAccessibleName("Microphone level")
        self.clock = QLabel("")
        # Nothing moves when listening starts: the button keeps its width (the widest of
        # its labels) and the meter and clock their room, so a second click lands on it.
        metrics = self.button.fontMetrics()
        widest = max(metrics.horizontalAdvance(label) for label in _LABELS.values())
        self.button.setMinimumWidth(widest + 24)
        for shown_while_listening in (self.meter, self.clock):
            policy = shown_while_listening.sizePolicy()
            policy.setRetainSizeWhenHidden(True)
            shown_while_listening.setSizePolicy(policy)
            shown_while_listening.hide()
        self.clock.setMinimumWidth(metrics.horizontalAdvance("00:00"))
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.button)
        row.addWidget(self.meter)
        row.addWidget(self.clock)
        row.addStretch(1)
        self._sync()

    # ---- what it may do ----------------------------------------------------------------

    def set_model(self, model: str | None) -> None:
        """The speech recogniser dictation uses (None: none is installed)."""
        self.model = model
        self.reason = unavailable_reason(model, "no speech recognition model is installed")
        self._sync()

    @property
    def available(self) -> bool:
        return self.reason is None

    # ---- press, hold, release ----------------------------------------------------------

    def _on_pressed(self) -> None:
        if self.state == "idle":
            self._pressed_at = time.monotonic()
            self._toggled = False
            self.start()

    def _on_released(self) -> None:
        if self.state != "recording":
            return
        pressed_at, self._pressed_at = self._pressed_at, None
        if (
            pressed_at is None or time.monotonic() - pressed_at >= HOLD_SECONDS
        ):  # the press that started it is over: this click stops it
            self.finish()
        else:
            self._toggled = True  # clicked: it keeps listening until the next click

    def start(self) -> None:
        """Start listening (or say why it cannot)."""
        if self.state != "idle":
            return
        if self.reason is not None:
            self.unavailable.emit(self.reason)
            return
        problem = self.microphone.start()
        if problem is not None:
            self.problem.emit(f"Dictation cannot start: {problem}.")
            return
        self.state = "recording"
        self._sync()

    def finish(self) -> None:
        """Stop listening and transcribe what was heard."""
        if self.state != "recording":
            return
        try:
            samples = self.microphone.stop()
        except AudioError as exc:
            self._to_idle()
            self.problem.emit(f"The recording could not be read: {exc}.")
            return
        if len(samples) == 0 or is_silent(samples):
            self._to_idle()
            self.problem.emit("Nothing was heard: check that the microphone is on and not muted.")
            return
        self.last_recording = samples
        self._transcribe(samples)

    def cancel(self) -> bool:
        """Drop the recording or the transcription in progress (Esc); whether one was."""
        if self.state == "recording":
            self.microphone.cancel()
        elif self.state == "transcribing" and self._worker is not None:
            self._worker.cancel()
        else:
            return False
        self._to_idle()
        return True

    # ---- transcription -----------------------------------------------------------------

    def _transcribe(self, samples: Samples) -> None:
        model = self.model
        if model is None:  # removed while recording
            self._to_idle()
            self.unavailable.emit("no speech recognition model is installed")
            return
        pipeline, engine = self._pipeline(), self._engine()
        worker = self._tasks.stream(lambda: dictate(pipeline, engine, model, samples))
        worker.yielded.connect(self._on_text)
        worker.errored.connect(self._on_error)
        worker.done.connect(lambda w=worker: self._on_done(w))
        self._worker = worker
        self.state = "transcribing"
        self._sync()
        worker.start()

    def _on_text(self, text: object) -> None:
        if self.state != "transcribing":
            return
        if isinstance(text, str) and text:
            self.transcribed.emit(text)
        else:
            self.problem.emit("Nothing was recognised in the recording.")

    def _on_error(self, exc: object) -> None:
        if self.state == "transcribing":
            logger.info("dictation failed: %s", exc)
            self.problem.emit(f"Dictation failed: {error_text(exc)}")  # type: ignore[arg-type]

    def _on_done(self, worker: StreamWorker) -> None:
        if worker is self._worker:
            self._to_idle()

    # ---- looks -------------------------------------------------------------------------

    def _to_idle(self) -> None:
        self.state = "idle"
        self._worker = None
        self._pressed_at = None
        self._toggled = False
        self._sync()

    def _on_level(self, level: float) -> None:
        self.meter.setValue(round(level * 100))
        seconds = int(self.microphone.seconds)
        self.clock.setText(f"{seconds // 60}:{seconds % 60:02d}")

    def _on_failed(self, message: str) -> None:
        if self.state == "recording":
            self._to_idle()
            self.problem.emit(f"Dictation stopped: {message}.")

    def _sync(self) -> None:
        recording = self.state == "recording"
        self.button.setText(_LABELS[self.state])
        self.meter.setVisible(recording)
        self.clock.setVisible(recording)
        if not recording:
            self.meter.setValue(0)
            self.clock.setText("")
        # Greyed out but pressable: pressing says why and offers the model (a disabled
        # button would hide the reason in a tooltip no keyboard can reach).
        self.button.setProperty("unavailable", self.reason is not None)
        self.button.style().unpolish(self.button)
        self.button.style().polish(self.button)
        if self.reason is not None:
            self.button.setToolTip(
                f"Dictation is off: {self.reason}. Press to get {DICTATION_PICK[1]}."
            )
        elif recording:
            self.button.setToolTip("Listening: release (or click) to stop, Esc to cancel")
        elif self.state == "transcribing":
            self.button.setToolTip("Turning your words into text; Esc cancels")
        else:
            self.button.setToolTip(
                "Hold to talk, or click to start and click again to stop; the words land "
                "in the message box"
            )
