"""``ChatWindow``: a small chat with streamed Markdown replies, Stop, history and live figures.

Replies run as :class:`desktop.chat.ReplyJob` on the task manager's asyncio loop; each chunk
reaches this window through :attr:`StreamWorker.yielded` on the GUI thread. The transcript is
re-rendered at most every ``RENDER_INTERVAL_MS`` while a reply streams, so a fast model never
floods the GUI thread with Markdown layout work.

Threading: GUI thread only.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor, QKeyEvent, QTextCursor, QTextDocument, QTextFormat
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from desktop.chat import (
    ChatOptions,
    LiveRate,
    ReplyDelta,
    ReplyDone,
    ReplyJob,
    ReplyStats,
    error_text,
    transcript_markdown,
)
from desktop.controller import Controller
from desktop.history import ChatHistory, Conversation
from desktop.icons import icon
from desktop.taskman import StreamWorker, TaskManager
from desktop.views.status_strip import StatusStrip
from engine.parsing import ToolCall

logger = logging.getLogger(__name__)

RENDER_INTERVAL_MS = 50
CODE_BACKGROUND = QColor("#eef1f5")


def _shade_code_blocks(document: QTextDocument) -> None:
    """Give fenced code a background (Qt's Markdown import sets only a monospace font)."""
    block = document.begin()
    while block.isValid():
        layout = block.blockFormat()
        if layout.hasProperty(QTextFormat.Property.BlockCodeFence):
            layout.setBackground(CODE_BACKGROUND)
            QTextCursor(block).setBlockFormat(layout)
        block = block.next()


class PromptEdit(QPlainTextEdit):
    """The message box: Enter sends, Shift+Enter starts a new line."""

    submitted = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submitted.emit()
            return
        super().keyPressEvent(event)


class ChatWindow(QWidget):
    """The chat. ``reply_finished`` carries the :class:`ReplyStats` of each reply (``None``
    when it failed before starting). A reasoning model's thinking arrives apart from the
    answer (``thinking_received``, :attr:`reply_thinking`), tool calls as calls
    (``tool_calls_received``, :attr:`reply_calls`); showing them is for a later change."""

    reply_finished = Signal(object)
    thinking_received = Signal(str)  # each piece of the reply's thinking
    tool_calls_received = Signal(object)  # the reply's tool calls (tuple of ToolCall)

    def __init__(
        self,
        controller: Controller,
        tasks: TaskManager,
        history: ChatHistory,
        options: ChatOptions | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.controller = controller
        self.tasks = tasks
        self.history = history
        self.options = options or ChatOptions()
        self.conversation = Conversation()
        self.last_stats: ReplyStats | None = None
        self.chunks_received = 0
        self._job: ReplyJob | None = None
        self._worker: StreamWorker | None = None
        self._pending: str | None = None
        self._rate: LiveRate | None = None
        self._finished: ReplyDone | None = None
        self.reply_thinking = ""  # the current (or last) reply's thinking
        self.reply_calls: tuple[ToolCall, ...] = ()

        self.setWindowTitle("Sidelight chat")
        self.setWindowIcon(icon(""))
        self.resize(560, 640)
        self._build()
        self._render_timer = QTimer(self)
        self._render_timer.setSingleShot(True)
        self._render_timer.setInterval(RENDER_INTERVAL_MS)
        self._render_timer.timeout.connect(self._render)

        controller.models_changed.connect(self._sync_models)
        controller.status_changed.connect(self._sync_models)
        self._sync_models()
        self._sync_history()
        self._render()

    # ---- layout ------------------------------------------------------------------------

    def _build(self) -> None:
        self.model_picker = QComboBox()
        self.model_picker.setToolTip("The model that answers (switches the server's model too)")
        self.model_picker.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.model_picker.activated.connect(self._on_model_picked)
        self.history_picker = QComboBox()
        self.history_picker.setToolTip("Earlier conversations")
        self.history_picker.activated.connect(self._on_history_picked)
        self.new_button = QPushButton("New chat")
        self.new_button.clicked.connect(self.new_chat)
        top = QHBoxLayout()
        top.addWidget(self.model_picker, 2)
        top.addWidget(self.history_picker, 1)
        top.addWidget(self.new_button)

        self.system_prompt = QLineEdit()
        self.system_prompt.setPlaceholderText("System prompt (optional)")
        self.system_prompt.textEdited.connect(self._on_system_prompt)

        self.transcript = QTextBrowser()
        self.transcript.setOpenExternalLinks(True)

        self.input = PromptEdit()
        self.input.setPlaceholderText("Message (Enter sends, Shift+Enter for a new line)")
        self.input.setFixedHeight(72)
        self.input.submitted.connect(self.send)
        self.send_button = QPushButton("Send")
        self.send_button.setDefault(True)
        self.send_button.clicked.connect(self._on_send_clicked)
        bottom = QHBoxLayout()
        bottom.addWidget(self.input, 1)
        bottom.addWidget(self.send_button, 0, Qt.AlignmentFlag.AlignBottom)

        self.status_strip = StatusStrip(lambda: self.controller.status.worker_pid)

        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.system_prompt)
        layout.addWidget(self.transcript, 1)
        layout.addLayout(bottom)
        layout.addWidget(self.status_strip)

    def show_and_raise(self) -> None:
        if self.isMinimized():
            self.showNormal()
        self.show()
        self.raise_()
        self.activateWindow()
        self.input.setFocus()

    # ---- sending and streaming ---------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._job is not None

    def send(self, text: str | None = None) -> None:
        """Send ``text`` (default: the message box) and stream the reply."""
        text = (self.input.toPlainText() if text is None else text).strip()
        if not text or self.busy:
            return
        self.input.clear()
        self.conversation.messages.append({"role": "user", "content": text})
        self.conversation.model = self.controller.active_model_id
        self._start_reply()

    def stop(self) -> None:
        """Stop the reply in the engine; what arrived so far is kept."""
        if self._job is not None:
            self._job.stop()
            self.send_button.setEnabled(False)  # until the engine confirms

    def _on_send_clicked(self) -> None:
        if self.busy:
            self.stop()
        else:
            self.send()

    def _start_reply(self) -> None:
        job = ReplyJob(
            self.controller.pipeline,
            self.controller.active_model_id,
            self.conversation.engine_messages(),
            self.options,
        )
        worker = self.tasks.stream(job.events)
        worker.yielded.connect(self._on_event)
        worker.errored.connect(self._on_error)
        worker.done.connect(self._on_done)
        self._job, self._worker = job, worker
        self._pending, self._finished = "", None
        self.reply_thinking, self.reply_calls = "", ()
        self._rate = LiveRate()
        self.chunks_received = 0
        self.send_button.setText("Stop")
        self.status_strip.set_generating(True)
        self._render()
        worker.start()

    def _on_event(self, event: object) -> None:
        if isinstance(event, ReplyDelta):
            self.chunks_received += 1
            self._pending = (self._pending or "") + event.text
            if event.thinking:
                self.reply_thinking += event.thinking
                self.thinking_received.emit(event.thinking)
            if self._rate is not None:
                self._rate.add(event.tokens)
                self.status_strip.set_rate(self._rate.tokens_per_second, self._rate.ttft_seconds)
            if not self._render_timer.isActive():
                self._render_timer.start()
        elif isinstance(event, ReplyDone):
            self._finished = event
            self.reply_calls = event.calls
            if event.calls:
                self.tool_calls_received.emit(event.calls)

    def _on_error(self, exc: object) -> None:
        message = error_text(exc) if isinstance(exc, BaseException) else str(exc)
        self.conversation.messages.append({"role": "error", "content": message})

    def _on_done(self) -> None:
        finished, text = self._finished, self._pending or ""
        stats = None
        if finished is not None:  # a failure arrived through _on_error instead
            if finished.stats.finish_reason == "cancelled":
                text += " *(stopped)*" if text else "*(stopped)*"
            self.conversation.messages.append({"role": "assistant", "content": text})
            stats = finished.stats
            self.last_stats = stats
            self.status_strip.set_rate(stats.tokens_per_second, stats.ttft_seconds)
        self._job = self._worker = None
        self._pending, self._rate = None, None
        self.send_button.setText("Send")
        self.send_button.setEnabled(True)
        self.status_strip.set_generating(False)
        self.status_strip.sample()
        self._render_timer.stop()
        self._render()
        self.history.save(self.conversation)
        self._sync_history()
        self.reply_finished.emit(stats)

    @property
    def last_reply(self) -> str | None:
        """The last assistant message of this conversation."""
        for message in reversed(self.conversation.messages):
            if message["role"] == "assistant":
                return message["content"]
        return None

    def _render(self) -> None:
        name = self.conversation.model or self.controller.active_model_id or "Assistant"
        bar = self.transcript.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        self.transcript.setMarkdown(
            transcript_markdown(self.conversation.messages, name, self._pending)
        )
        _shade_code_blocks(self.transcript.document())
        if at_bottom:
            self.transcript.moveCursor(QTextCursor.MoveOperation.End)
            bar.setValue(bar.maximum())

    # ---- conversations -----------------------------------------------------------------

    def new_chat(self) -> None:
        if self.busy:
            self.stop()
            return  # the reply ends first; press again for a fresh chat
        self.conversation = Conversation(system_prompt=self.system_prompt.text())
        self.last_stats = None
        self._render()
        self._sync_history()
        self.input.setFocus()

    def _on_system_prompt(self, text: str) -> None:
        self.conversation.system_prompt = text

    def _on_history_picked(self, index: int) -> None:
        conversation_id = self.history_picker.itemData(index)
        if not conversation_id or self.busy:
            self.history_picker.setCurrentIndex(0)
            return
        for conversation in self.history.list():
            if conversation.id == conversation_id:
                self.conversation = conversation
                self.system_prompt.setText(conversation.system_prompt)
                break
        self._render()

    def _sync_history(self) -> None:
        picker = self.history_picker
        picker.blockSignals(True)
        picker.clear()
        picker.addItem("History", None)
        for conversation in self.history.list()[:50]:
            picker.addItem(conversation.title, conversation.id)
        picker.setCurrentIndex(0)
        picker.blockSignals(False)

    # ---- model picker ------------------------------------------------------------------

    def _sync_models(self, *_: object) -> None:
        picker = self.model_picker
        picker.blockSignals(True)
        picker.clear()
        for choice in self.controller.models():
            picker.addItem(choice.label, choice.id)
        active = self.controller.active_model_id
        index = picker.findData(active) if active else -1
        if index >= 0:
            picker.setCurrentIndex(index)
        picker.blockSignals(False)
        state = self.controller.status.state
        picker.setToolTip(f"{active or 'no model'}: {state}")

    def _on_model_picked(self, index: int) -> None:
        model_id = self.model_picker.itemData(index)
        if model_id and model_id != self.controller.active_model_id:
            self.controller.select_model(str(model_id))
