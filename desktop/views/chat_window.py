"""``ChatWindow``: a small chat with streamed Markdown replies, Stop, history and live figures.

Replies run as :class:`desktop.chat.ReplyJob` on the task manager's asyncio loop; each chunk
reaches this window through :attr:`StreamWorker.yielded` on the GUI thread. The transcript is
re-rendered at most every ``RENDER_INTERVAL_MS`` while a reply streams, so a fast model never
floods the GUI thread with layout work.

A message the model refuses (too long, no model loaded...) is marked *not sent* and left out
of what the model sees next; a notice offers what can be done about it.

Threading: GUI thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QGuiApplication,
    QKeyEvent,
    QKeySequence,
)
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLineEdit,
    QMenu,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QToolButton,
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
    ThinkingClock,
    error_text,
)
from desktop.controller import Controller
from desktop.history import (
    ChatHistory,
    ChatMessage,
    Conversation,
    ToolCallRecord,
    sent_to_model,
)
from desktop.icons import icon
from desktop.taskman import StreamWorker, TaskManager
from desktop.views.chat_list import ChatList
from desktop.views.notice import NoticeAction, NoticeBar
from desktop.views.screen import fit_to_screen
from desktop.views.status_strip import StatusStrip
from desktop.views.transcript import Pending, TranscriptView
from engine.parsing import ToolCall
from engine.server.errors import APIError

logger = logging.getLogger(__name__)

RENDER_INTERVAL_MS = 50
PREFERRED_SIZE = QSize(620, 700)
CONTEXT_EXCEEDED = "context_length_exceeded"

NEW_CHAT_KEYS = QKeySequence("Ctrl+N")
STOP_KEYS = QKeySequence("Ctrl+.")
FOCUS_KEYS = QKeySequence("Ctrl+L")
COPY_KEYS = QKeySequence("Ctrl+Shift+C")
QUIT_KEYS = QKeySequence("Ctrl+Q")


def _keys(sequence: QKeySequence) -> str:
    return sequence.toString(QKeySequence.SequenceFormat.NativeText)


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
    answer (``thinking_received``, :attr:`reply_thinking`) and shows in its own section
    above it; tool calls arrive as calls (``tool_calls_received``, :attr:`reply_calls`) and
    show as such. Both are kept in the history, never in the reply's text.

    ``escape_hides``: Esc (when no reply runs) hides the window; the app turns it off when
    there is no tray icon to bring it back, and Esc then minimizes. ``closed`` fires when the
    window is closed (not hidden).
    """

    reply_finished = Signal(object)
    thinking_received = Signal(str)  # each piece of the reply's thinking
    tool_calls_received = Signal(object)  # the reply's tool calls (tuple of ToolCall)
    open_settings = Signal()
    open_models = Signal()
    open_requests = Signal()
    quit_requested = Signal()
    closed = Signal()

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
        self.escape_hides = True
        self._job: ReplyJob | None = None
        self._worker: StreamWorker | None = None
        self._pending: str | None = None
        self._pending_model = "Assistant"
        self._rate: LiveRate | None = None
        self._clock = ThinkingClock()
        self._finished: ReplyDone | None = None
        self._refusal: tuple[str, str | None] | None = None  # message, code
        self._dropping = False  # "drop the oldest turns" retries until the message fits
        self.reply_thinking = ""  # the current (or last) reply's thinking
        self.reply_calls: tuple[ToolCall, ...] = ()

        self.setWindowIcon(icon(""))
        self._build()
        fit_to_screen(self, PREFERRED_SIZE)
        self._render_timer = QTimer(self)
        self._render_timer.setSingleShot(True)
        self._render_timer.setInterval(RENDER_INTERVAL_MS)
        self._render_timer.timeout.connect(self._render)

        controller.models_changed.connect(self._sync_models)
        controller.status_changed.connect(self._sync_models)
        self._sync_models()
        self._sync_history()
        self._sync_title()
        self._render()

    # ---- layout ------------------------------------------------------------------------

    def _build(self) -> None:
        self._build_actions()
        top = self._build_top()
        self.system_prompt = QLineEdit()
        self.system_prompt.setPlaceholderText("System prompt (optional)")
        self.system_prompt.textEdited.connect(self._on_system_prompt)
        self.transcript = TranscriptView()
        self.chat_list = ChatList(self.history)
        self.chat_list.picked.connect(self.open_conversation)
        self.chat_list.renamed.connect(self._on_renamed)
        self.chat_list.deleted.connect(self._on_deleted)
        self.chat_list.hide()
        self.chats_button.toggled.connect(self.chat_list.setVisible)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.chat_list)
        splitter.addWidget(self.transcript)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([180, 440])
        self.notice = NoticeBar()
        bottom = self._build_bottom()
        self.status_strip = StatusStrip(lambda: self.controller.status.worker_pid)

        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.system_prompt)
        layout.addWidget(splitter, 1)
        layout.addWidget(self.notice)
        layout.addLayout(bottom)
        layout.addWidget(self.status_strip)
        self._sync_send_button()

    def _build_top(self) -> QHBoxLayout:
        self.chats_button = QToolButton()
        self.chats_button.setText("Chats")
        self.chats_button.setCheckable(True)
        self.chats_button.setToolTip("Show earlier chats (rename or delete them there)")
        self.model_picker = QComboBox()
        self.model_picker.setToolTip("The model that answers (switches the server's model too)")
        self.model_picker.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.model_picker.setMinimumContentsLength(12)
        self.model_picker.activated.connect(self._on_model_picked)
        self.new_button = QPushButton("New chat")
        self.new_button.setToolTip(f"Start a new chat ({_keys(NEW_CHAT_KEYS)})")
        self.new_button.clicked.connect(self.new_action.trigger)
        self.menu_button = QToolButton()
        self.menu_button.setText("More")
        self.menu_button.setToolTip("More: copy the last reply, settings, models, quit")
        self.menu_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.menu_button.setMenu(self._build_menu())
        top = QHBoxLayout()
        top.addWidget(self.chats_button)
        top.addWidget(self.model_picker, 1)
        top.addWidget(self.new_button)
        top.addWidget(self.menu_button)
        return top

    def _build_bottom(self) -> QHBoxLayout:
        self.input = PromptEdit()
        self.input.setPlaceholderText("Message (Enter sends, Shift+Enter for a new line)")
        self.input.setToolTip(f"Your message ({_keys(FOCUS_KEYS)} comes back here)")
        self.input.setFixedHeight(72)
        self.input.submitted.connect(self.send)
        self.send_button = QPushButton("Send")
        self.send_button.setDefault(True)
        self.send_button.clicked.connect(self._on_send_clicked)
        self.copy_button = QPushButton("Copy reply")
        self.copy_button.setToolTip(f"Copy the last reply ({_keys(COPY_KEYS)})")
        self.copy_button.clicked.connect(self.copy_action.trigger)
        side = QVBoxLayout()
        side.addWidget(self.send_button)
        side.addWidget(self.copy_button)
        side.addStretch(1)
        bottom = QHBoxLayout()
        bottom.addWidget(self.input, 1)
        bottom.addLayout(side)
        return bottom

    def _build_actions(self) -> None:
        def action(text: str, keys: QKeySequence, slot: Callable[[], None]) -> QAction:
            made = QAction(text, self)
            made.setShortcut(keys)
            made.triggered.connect(slot)
            self.addAction(made)  # window-wide, whichever child has the focus
            return made

        self.new_action = action("New chat", NEW_CHAT_KEYS, self.new_chat)
        self.stop_action = action("Stop the reply", STOP_KEYS, self.stop)
        self.focus_action = action("Go to the message box", FOCUS_KEYS, self.focus_input)
        self.copy_action = action("Copy the last reply", COPY_KEYS, self.copy_last_reply)
        self.quit_action = action("Quit Sidelight", QUIT_KEYS, self.quit_requested.emit)

    def _build_menu(self) -> QMenu:
        menu = QMenu(self)
        menu.addAction(self.copy_action)
        menu.addAction(self.new_action)
        menu.addSeparator()
        menu.addAction("Download models…").triggered.connect(self.open_models)
        menu.addAction("Requests…").triggered.connect(self.open_requests)
        menu.addAction("Settings…").triggered.connect(self.open_settings)
        menu.addSeparator()
        menu.addAction(self.quit_action)
        return menu

    def show_and_raise(self) -> None:
        if self.isMinimized():
            self.showNormal()
        self.show()
        self.raise_()
        self.activateWindow()
        self.input.setFocus()

    def focus_input(self) -> None:
        self.show_and_raise()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        # Esc reaches the window only when no child used it (a list editor, a popup...).
        if event.key() == Qt.Key.Key_Escape and not event.modifiers():
            self._on_escape()
            return
        super().keyPressEvent(event)

    def closeEvent(self, event: QCloseEvent) -> None:
        super().closeEvent(event)
        if event.isAccepted():
            self.closed.emit()

    def _on_escape(self) -> None:
        if self.busy:
            self.stop()
        elif self.escape_hides:
            self.hide()
        else:
            self.showMinimized()

    # ---- sending and streaming ---------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._job is not None

    def send(self, text: str | None = None) -> None:
        """Send ``text`` (default: the message box) and stream the reply."""
        text = (self.input.toPlainText() if text is None else text).strip()
        if not text or self.busy:
            return
        self.notice.dismiss()
        self.input.clear()
        self.conversation.messages.append(ChatMessage(role="user", content=text))
        self._start_reply()

    def stop(self) -> None:
        """Stop the reply in the engine; what arrived so far is kept."""
        if self._job is not None:
            self._job.stop()
            self.send_button.setEnabled(False)  # until the engine confirms

    def copy_last_reply(self) -> None:
        reply = self.last_reply
        if reply:
            QGuiApplication.clipboard().setText(reply)

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
        self._pending, self._finished, self._refusal = "", None, None
        self._pending_model = self.controller.active_model_id or "Assistant"
        self.reply_thinking, self.reply_calls = "", ()
        self._rate, self._clock = LiveRate(), ThinkingClock()
        self.chunks_received = 0
        self._sync_send_button()
        self.status_strip.set_generating(True)
        self._sync_title()
        self._render()
        worker.start()

    def _sync_send_button(self) -> None:
        if self.busy:
            self.send_button.setText("Stop")
            self.send_button.setToolTip(f"Stop the reply (Esc or {_keys(STOP_KEYS)})")
        else:
            self.send_button.setText("Send")
            self.send_button.setToolTip("Send the message (Enter)")

    def _on_event(self, event: object) -> None:
        if isinstance(event, ReplyDelta):
            self.chunks_received += 1
            self._pending = (self._pending or "") + event.text
            self._clock.add(event)
            if event.thinking:
                self.reply_thinking += event.thinking
                self.thinking_received.emit(event.thinking)
            if self._rate is not None:
                self._rate.add(event.tokens)
                self.status_strip.set_rate(self._rate.tokens_per_second, self._rate.ttft_seconds)
            if not self._render_timer.isActive():
                self._render_timer.start()
        elif isinstance(event, ReplyDone):
            self._clock.stop()
            self._finished = event
            self.reply_calls = event.calls
            if event.calls:
                self.tool_calls_received.emit(event.calls)

    def _on_error(self, exc: object) -> None:
        """The model refused the message before answering: it leaves the conversation."""
        message = error_text(exc) if isinstance(exc, BaseException) else str(exc)
        code = exc.code if isinstance(exc, APIError) else None
        for entry in reversed(self.conversation.messages):
            if entry["role"] == "user":
                entry["failed"] = True
                break
        self.conversation.messages.append(ChatMessage(role="error", content=message))
        self._refusal = (message, code)

    def _on_done(self) -> None:
        finished, text = self._finished, self._pending or ""
        stats = None
        if finished is not None:  # a failure arrived through _on_error instead
            reply = ChatMessage(role="assistant", content=text, model=self._pending_model)
            if finished.stats.finish_reason == "cancelled":
                reply["stopped"] = True
            if finished.thinking:
                reply["thinking"] = finished.thinking
                reply["thinking_seconds"] = round(self._clock.seconds or 0.0, 2)
            if finished.calls:
                reply["calls"] = [
                    ToolCallRecord(id=c.id, name=c.name, arguments=c.arguments)
                    for c in finished.calls
                ]
            self.conversation.messages.append(reply)
            self.conversation.model = self._pending_model
            stats = finished.stats
            self.last_stats = stats
            self.status_strip.set_rate(stats.tokens_per_second, stats.ttft_seconds)
        self._job = self._worker = None
        self._pending, self._rate = None, None
        self._sync_send_button()
        self.send_button.setEnabled(True)
        self.status_strip.set_generating(False)
        self.status_strip.sample()
        self._render_timer.stop()
        self._render()
        self.history.save(self.conversation)
        self._sync_history()
        refusal, self._refusal = self._refusal, None
        if refusal is not None and self._on_refused(*refusal):
            return  # retrying with fewer turns: the reply has not finished yet
        self._dropping = False
        self.reply_finished.emit(stats)

    @property
    def last_reply(self) -> str | None:
        """The last assistant message of this conversation: its answer alone (no thinking,
        no tool calls, no marker)."""
        for message in reversed(self.conversation.messages):
            if message["role"] == "assistant":
                return message["content"]
        return None

    def _render(self, *, to_end: bool = False) -> None:
        pending = None
        if self._pending is not None:
            pending = Pending(
                self._pending, self._pending_model, self.reply_thinking, self._clock.seconds
            )
        self.transcript.show_conversation(
            self.conversation.messages,
            pending,
            fallback_model=self.conversation.model or "Assistant",
            to_end=to_end,
        )

    # ---- a refused message -------------------------------------------------------------

    def _on_refused(self, message: str, code: str | None) -> bool:
        """Offer what can be done about a refused message; True if a retry started."""
        older_turns = any(sent_to_model(m) for m in self.conversation.messages)
        if code == CONTEXT_EXCEEDED and self._dropping and older_turns:
            self.drop_oldest_and_retry()
            return True
        self._dropping = False
        edit = NoticeAction(
            "Edit message", self.edit_failed, "Take the message back into the message box"
        )
        remove = NoticeAction("Remove", self.remove_failed, "Remove the message from the chat")
        if code == CONTEXT_EXCEEDED and older_turns:
            self.notice.show_notice(
                "This chat no longer fits in the model's context, so the model cannot "
                "answer. Drop the oldest turns (they stay here, greyed out), or start a new "
                "chat with this message.",
                [
                    NoticeAction(
                        "Drop oldest turns",
                        self.drop_oldest_and_retry,
                        "Stop sending the oldest turns to the model and send the message again",
                    ),
                    NoticeAction(
                        "New chat", self.new_chat_with_failed, "Start a new chat with this message"
                    ),
                    edit,
                    remove,
                ],
            )
        elif code == CONTEXT_EXCEEDED:
            self.notice.show_notice(
                "This message is longer than the model's context. Shorten it, or split it "
                "into parts.",
                [edit, remove],
            )
        else:
            retry = NoticeAction("Try again", self.retry_failed, "Send the message again")
            self.notice.show_notice(f"The model did not answer: {message}", [retry, edit, remove])
        # The notice takes room from the transcript: keep the refused message in view.
        QTimer.singleShot(0, self.transcript.scroll_to_end)
        return False

    def drop_oldest_and_retry(self) -> None:
        """Drop the oldest turn from the context and send the refused message again; while
        it still does not fit, the next oldest goes too."""
        if self.busy or not self.conversation.drop_oldest_turn():
            return
        text = self.conversation.take_failed()
        if text is None:
            self._render()
            return
        self._dropping = True
        self.send(text)

    def retry_failed(self) -> None:
        text = None if self.busy else self.conversation.take_failed()
        if text is not None:
            self.send(text)

    def edit_failed(self) -> None:
        """Take the refused message out of the chat and back into the message box."""
        text = self.conversation.take_failed()
        if text is not None:
            self.input.setPlainText(text)
            self._after_failed_taken()

    def remove_failed(self) -> None:
        if self.conversation.take_failed() is not None:
            self._after_failed_taken()

    def new_chat_with_failed(self) -> None:
        text = self.conversation.take_failed()
        if text is None or self.busy:
            return
        self.history.save(self.conversation)
        self.new_chat()
        self.input.setPlainText(text)

    def _after_failed_taken(self) -> None:
        if self.conversation.messages:
            self.history.save(self.conversation)
        else:
            self.history.delete(self.conversation.id)  # nothing left worth keeping
        self._sync_history()
        self._render()
        self._sync_title()
        self.focus_input()

    # ---- conversations -----------------------------------------------------------------

    def new_chat(self) -> None:
        if self.busy:
            self.stop()
            return  # the reply ends first; press again for a fresh chat
        self._show(Conversation(system_prompt=self.system_prompt.text()))
        self.input.setFocus()

    def open_conversation(self, conversation_id: str) -> None:
        """Show a saved conversation (not while a reply runs)."""
        conversation = None if self.busy else self.history.get(conversation_id)
        if conversation is None:
            self._sync_history()
            return
        self.system_prompt.setText(conversation.system_prompt)
        self._show(conversation)

    def _show(self, conversation: Conversation) -> None:
        self.conversation = conversation
        self.transcript.forget_toggles()
        self.last_stats = None
        self.notice.dismiss()
        self.status_strip.reset_reply()
        self._render(to_end=True)
        self._sync_history()
        self._sync_title()

    def _on_system_prompt(self, text: str) -> None:
        self.conversation.system_prompt = text

    def _on_renamed(self, conversation_id: str) -> None:
        if conversation_id == self.conversation.id:
            saved = self.history.get(conversation_id)
            self.conversation.name = saved.name if saved else None
            self._sync_title()

    def _on_deleted(self, conversation_id: str) -> None:
        if conversation_id == self.conversation.id and not self.busy:
            self._show(Conversation(system_prompt=self.system_prompt.text()))

    def _sync_history(self) -> None:
        self.chat_list.refresh(self.conversation.id)

    def _sync_title(self) -> None:
        self.setWindowTitle(f"{self.conversation.title} — Sidelight")

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
