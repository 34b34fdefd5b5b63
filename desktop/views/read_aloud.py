"""*Read aloud* on a reply: the installed text-to-speech model says it, sentence by sentence.

Each piece is synthesised through the speech endpoint's engine path
(:func:`desktop.speech.read_aloud`) and queued on the :class:`desktop.audio_io.Speaker` as
soon as it is said, so the first sentence is heard while the rest is still being made.
Reading another reply, or :meth:`ReadAloud.stop` (Esc, the notice's *Stop*), ends the one
being read. With no speech model or no audio output, ``unavailable`` says why (the chat
offers the catalog's SpeechT5).

Threading: GUI thread only; the synthesis runs on the task manager's asyncio loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from desktop.audio_io import Speaker, unavailable_reason
from desktop.chat import error_text
from desktop.speech import read_aloud
from desktop.taskman import StreamWorker, TaskManager
from engine.runtime import Said, ServedEngine
from engine.server.pipeline import Pipeline

logger = logging.getLogger(__name__)


class ReadAloud(QObject):
    """Reads one reply at a time.

    Signals: ``started(int)`` reading message ``index`` began; ``ended()`` it was heard to
    the end or stopped; ``problem(str)`` synthesis or playback failed; ``unavailable(str)``
    reading was asked for while it cannot work (the reason).
    """

    started = Signal(int)
    ended = Signal()
    problem = Signal(str)
    unavailable = Signal(str)

    def __init__(
        self,
        tasks: TaskManager,
        pipeline: Callable[[], Pipeline],
        engine: Callable[[], ServedEngine],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._tasks = tasks
        self._pipeline = pipeline
        self._engine = engine
        self.model: str | None = None
        self.reason: str | None = "no text-to-speech model is installed"
        self.reading: int | None = None  # the message being read
        self.pieces_heard = 0  # pieces queued for the current reading (tests read it)
        self._worker: StreamWorker | None = None
        self.speaker = Speaker(self)
        self.speaker.finished.connect(self._on_heard)
        self.speaker.failed.connect(self._on_speaker_failed)

    def set_model(self, model: str | None) -> None:
        """The text-to-speech model to read with (None: none is installed)."""
        self.model = model
        self.reason = unavailable_reason(model, "no text-to-speech model is installed")

    def read(self, index: int, text: str) -> None:
        """Read message ``index`` (``text``); reading the one being read stops it."""
        if self.reading == index:
            self.stop()
            return
        self.stop()
        if self.reason is not None or self.model is None:
            self.unavailable.emit(self.reason or "no text-to-speech model is installed")
            return
        if not text.strip():
            self.problem.emit("This reply has no text to read.")
            return
        pipeline, engine, model = self._pipeline(), self._engine(), self.model
        worker = self._tasks.stream(lambda: read_aloud(pipeline, engine, model, text))
        worker.yielded.connect(lambda piece, w=worker: self._on_piece(w, piece))
        worker.errored.connect(lambda exc, w=worker: self._on_error(w, exc))
        worker.done.connect(lambda w=worker: self._on_synthesised(w))
        self._worker = worker
        self.reading = index
        self.pieces_heard = 0
        worker.start()
        self.started.emit(index)

    def stop(self) -> bool:
        """Stop reading now; whether something was being read."""
        if self.reading is None:
            return False
        if self._worker is not None:
            self._worker.cancel()
        self._worker = None
        self.speaker.stop()
        self.reading = None
        self.ended.emit()
        return True

    def _on_piece(self, worker: StreamWorker, piece: object) -> None:
        if worker is not self._worker or not isinstance(piece, Said):
            return
        problem = self.speaker.add(piece.samples, piece.sample_rate)
        if problem is not None:
            self.stop()
            self.problem.emit(f"Read aloud cannot play: {problem}.")
            return
        self.pieces_heard += 1

    def _on_error(self, worker: StreamWorker, exc: object) -> None:
        if worker is not self._worker:
            return
        logger.info("read aloud failed: %s", exc)
        self.stop()
        self.problem.emit(f"Read aloud failed: {error_text(exc)}")  # type: ignore[arg-type]

    def _on_synthesised(self, worker: StreamWorker) -> None:
        """Every piece is said: the speaker ends once the last one is heard."""
        if worker is self._worker:
            self._worker = None
            if self.speaker.playing:
                self.speaker.close()
            elif self.reading is not None:  # nothing was queued (all failed quietly)
                self.reading = None
                self.ended.emit()

    def _on_heard(self) -> None:
        if self.reading is not None and self._worker is None:
            self.reading = None
            self.ended.emit()

    def _on_speaker_failed(self, message: str) -> None:
        if self.reading is not None:
            self.stop()
            self.problem.emit(f"Read aloud stopped: {message}.")
