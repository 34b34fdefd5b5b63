"""The chat window's voice: dictation into the message box and *Read aloud* on replies.

:class:`ChatSpeech` owns the *Dictate* control (:mod:`desktop.views.dictation`) and the
reader (:mod:`desktop.views.read_aloud`), keeps both on the installed speech models
(``Controller.speech``, refreshed with the model list), and says in the chat's notice bar
what happens: "Reading aloud…" with *Stop*, a failure, or, when a model is missing, the
reason with a one-click *Get Whisper Base…* / *Get SpeechT5…* that opens the catalog on it.

Threading: GUI thread only.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction, QKeySequence, QTextCursor
from PySide6.QtWidgets import QPlainTextEdit, QWidget

from desktop.audio_io import audio_missing
from desktop.controller import Controller
from desktop.speech import DICTATION_PICK, READ_ALOUD_PICK
from desktop.taskman import TaskManager
from desktop.views.dictation import DictationControl
from desktop.views.notice import NoticeAction, NoticeBar
from desktop.views.read_aloud import ReadAloud
from desktop.views.transcript import TranscriptView

DICTATE_KEYS = QKeySequence("Ctrl+D")
READING = "Reading the reply aloud…"


class ChatSpeech(QObject):
    """Dictation and *Read aloud* for one chat window.

    ``open_catalog(entry_id)`` asks for the model catalog opened on an entry. ``host`` gets
    the window-wide *Dictate* shortcut (:data:`DICTATE_KEYS`: press to start, again to stop).
    """

    open_catalog = Signal(str)

    def __init__(
        self,
        controller: Controller,
        tasks: TaskManager,
        prompt: QPlainTextEdit,
        notice: NoticeBar,
        transcript: TranscriptView,
        host: QWidget,
    ) -> None:
        super().__init__(host)
        self.controller = controller
        self.transcript = transcript
        self.prompt = prompt
        self.notice = notice
        self.dictation = DictationControl(
            tasks, lambda: controller.pipeline, lambda: controller.engine
        )
        self.dictation.transcribed.connect(self._insert)
        self.dictation.problem.connect(self._say)
        self.dictation.unavailable.connect(
            lambda why: self._offer("Dictation", why, DICTATION_PICK)
        )
        self.reader = ReadAloud(tasks, lambda: controller.pipeline, lambda: controller.engine, self)
        self.reader.started.connect(self._on_reading)
        self.reader.ended.connect(self._on_read)
        self.reader.problem.connect(self._say)
        self.reader.unavailable.connect(lambda why: self._offer("Read aloud", why, READ_ALOUD_PICK))
        self.dictate_action = QAction("Dictate", host)
        self.dictate_action.setShortcut(DICTATE_KEYS)
        self.dictate_action.triggered.connect(self.toggle_dictation)
        host.addAction(self.dictate_action)
        controller.models_changed.connect(self.sync)
        self.sync()

    def sync(self) -> None:
        """Follow the installed speech models."""
        speech = self.controller.speech
        self.dictation.set_model(speech.transcription)
        self.reader.set_model(speech.speech)
        # The replies' Read aloud pills greyed out, saying why, while it cannot work.
        self.transcript.set_action_off("read", self.reader.reason)

    def toggle_dictation(self) -> None:
        """The shortcut: start listening, or stop and transcribe."""
        if self.dictation.state == "recording":
            self.dictation.finish()
        else:
            self.dictation.start()

    def read(self, index: int, text: str) -> None:
        self.reader.read(index, text)

    def cancel(self) -> bool:
        """Esc: drop a dictation, else stop reading; whether there was one."""
        return self.dictation.cancel() or self.reader.stop()

    # ---- what the notice says ----------------------------------------------------------

    def _insert(self, text: str) -> None:
        """The words heard go in at the cursor, spaced from the text around them."""
        cursor = self.prompt.textCursor()
        before = self.prompt.toPlainText()[: cursor.position()]
        spaced = f" {text}" if before and not before[-1].isspace() else text
        cursor.insertText(spaced)
        self.prompt.setTextCursor(cursor)
        self.prompt.moveCursor(QTextCursor.MoveOperation.EndOfBlock)
        self.prompt.setFocus()

    def _say(self, text: str) -> None:
        self.notice.show_notice(text, [])

    def _offer(self, what: str, why: str, pick: tuple[str, str]) -> None:
        entry, name = pick
        if audio_missing() is not None:  # no model would help
            self.notice.show_notice(f"{what} is off: {why}.", [])
            return
        get: Callable[[], None] = lambda: self.open_catalog.emit(entry)  # noqa: E731
        self.notice.show_notice(
            f"{what} is off: {why}.",
            [NoticeAction(f"Get {name}…", get, f"Open the model catalog on {name}")],
        )

    def _on_reading(self, _index: int) -> None:
        self.notice.show_notice(
            READING,
            [NoticeAction("Stop", self._stop_reading, "Stop reading (Esc)")],
        )

    def _stop_reading(self) -> None:
        self.reader.stop()

    def _on_read(self) -> None:
        if self.notice.text == READING:
            self.notice.dismiss()
