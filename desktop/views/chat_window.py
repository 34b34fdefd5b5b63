"""``ChatWindow``: a small chat with streamed Markdown replies, Stop, history and live figures.

Replies run as :class:`desktop.chat.ReplyJob` on the task manager's asyncio loop; each chunk
reaches this window through :attr:`StreamWorker.yielded` on the GUI thread. The transcript is
re-rendered at most every ``RENDER_INTERVAL_MS`` while a reply streams, so a fast model never
floods the GUI thread with layout work.

A message the model refuses (too long, no model loaded...) is marked *not sent* and left out
of what the model sees next; a notice offers what can be done about it.

The conversation and the reply live in a Qt-free :class:`desktop.chat_session.ChatSession`:
this window draws it and feeds it the reply's events. The message actions and the refusal
notice emit intents that :meth:`ChatWindow.apply` carries out through the session.

Threading: GUI thread only.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QGuiApplication,
    QKeyEvent,
    QKeySequence,
    QTextCursor,
)
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QMenu,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from desktop.chat import ChatEvent, ChatOptions, ReplyJob, ReplyStats
from desktop.chat_images import engine_request, failed_images, images_sent
from desktop.chat_session import (
    CancelEdit,
    ChatSession,
    Delete,
    DropOldest,
    Edit,
    EditFailed,
    Intent,
    NewChat,
    Regenerate,
    RemoveFailed,
    Reply,
    Retry,
    ShowVersion,
)
from desktop.controller import Controller
from desktop.history import ChatHistory, ChatMessage, Conversation
from desktop.icons import icon
from desktop.taskman import StreamWorker, TaskManager
from desktop.views.attachments import PendingAttachments
from desktop.views.chat_list import ChatList
from desktop.views.chat_settings import ChatSettingsDialog
from desktop.views.chat_speech import ChatSpeech
from desktop.views.empty_chat import intro_for
from desktop.views.image_attachments import PendingImages
from desktop.views.image_thumbnails import show_images_from
from desktop.views.message_actions import MessageActions
from desktop.views.notice import NoticeBar
from desktop.views.refusal import RefusalView
from desktop.views.screen import fit_to_screen
from desktop.views.status_strip import StatusStrip
from desktop.views.transcript import Pending, TranscriptView
from engine.parsing import ToolCall
from engine.server.errors import APIError
from engine.supervisor.states import READY, EngineStatus

logger = logging.getLogger(__name__)

RENDER_INTERVAL_MS = 50
PREFERRED_SIZE = QSize(620, 700)

NEW_CHAT_KEYS = QKeySequence("Ctrl+N")
STOP_KEYS = QKeySequence("Ctrl+.")
FOCUS_KEYS = QKeySequence("Ctrl+L")
COPY_KEYS = QKeySequence("Ctrl+Shift+C")
QUIT_KEYS = QKeySequence("Ctrl+Q")
SETTINGS_KEYS = QKeySequence("Ctrl+,")
ATTACH_KEYS = QKeySequence("Ctrl+O")
PASTE_KEYS = QKeySequence("Ctrl+Shift+V")


PROMPT_PREVIEW_WORDS = 6
PROMPT_PREVIEW_CHARS = 48


def system_prompt_preview(prompt: str) -> str:
    """The first words of ``prompt``, short enough for the chip (an ellipsis when cut)."""
    words = prompt.split()
    shown = " ".join(words[:PROMPT_PREVIEW_WORDS])
    if len(shown) > PROMPT_PREVIEW_CHARS:
        shown = shown[: PROMPT_PREVIEW_CHARS - 1].rstrip()
    return shown + ("…" if shown != " ".join(words) else "")


def _keys(sequence: QKeySequence) -> str:
    return sequence.toString(QKeySequence.SequenceFormat.NativeText)


class PromptEdit(QPlainTextEdit):
    """The message box: Enter sends, Shift+Enter starts a new line; Tab and Shift+Tab move
    to the next or previous control (a message box that eats Tab traps the keyboard)."""

    submitted = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTabChangesFocus(True)

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

    ``escape_hides``: Esc first ends an edit in progress, else stops a running reply, and
    only then hides the window; the app turns it off when
    there is no tray icon to bring it back, and Esc then minimizes. ``closed`` fires when the
    window is closed (not hidden).

    ``session`` holds the conversation and the reply; the attributes that read them
    (``conversation``, ``last_stats``, ``chunks_received``, ``reply_thinking``...) are views
    of it.
    """

    reply_finished = Signal(object)
    thinking_received = Signal(str)  # each piece of the reply's thinking
    tool_calls_received = Signal(object)  # the reply's tool calls (tuple of ToolCall)
    open_settings = Signal()
    open_models = Signal()
    open_catalog = Signal(str)  # the catalog opened on an entry (a speech model to get)
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
        self.session = ChatSession()
        self.escape_hides = True
        self._missing_said: tuple[str, str] | None = None  # (chat, model) said gone
        self._crash_notice: str | None = None  # the crash notice shown, until recovery
        self._job: ReplyJob | None = None
        self._worker: StreamWorker | None = None

        self.setWindowIcon(icon(""))
        self._build()
        fit_to_screen(self, PREFERRED_SIZE)
        self._render_timer = QTimer(self)
        self._render_timer.setSingleShot(True)
        self._render_timer.setInterval(RENDER_INTERVAL_MS)
        self._render_timer.timeout.connect(self._render)

        controller.models_changed.connect(self._sync_models)
        controller.status_changed.connect(self._sync_models)
        controller.status_changed.connect(self._on_engine_status)
        controller.chore_changed.connect(self._sync_chore)
        self._sync_chore()
        self._sync_models()
        self._sync_history()
        self._sync_title()
        self._render()
        self._reopen_last()

    def _reopen_last(self) -> None:
        """A start shows the chat last used (a blank one only when there is none)."""
        recent = self.history.list()
        if recent:
            self._show(recent[0])

    def _on_engine_status(self, status: EngineStatus) -> None:
        """The engine is ready again after a crash cut a reply: its notice goes (the reply
        stays marked interrupted, and its Regenerate link answers it again)."""
        if self._crash_notice is None or status.state != READY:
            return
        if self.notice.text == self._crash_notice:  # not replaced by a newer notice
            self.notice.dismiss()
        self._crash_notice = None

    def _sync_chore(self) -> None:
        """Moving models or tuning for the CPU: said in the status strip while it runs."""
        self.status_strip.set_chore(self.controller.chore)

    # ---- layout ------------------------------------------------------------------------

    def _build(self) -> None:
        self._build_actions()
        top = self._build_top()
        self.transcript = TranscriptView()
        self.transcript.starter_chosen.connect(self._on_starter)
        show_images_from(self.transcript, self.history.folder)
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
        self.menu_button.menu().insertAction(self._tools_end, self.speech.dictate_action)
        self.status_strip = StatusStrip(self.controller.worker_pids)

        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(splitter, 1)
        layout.addWidget(self.notice)
        layout.addLayout(bottom)
        layout.addWidget(self.status_strip)
        self._set_tab_order()
        self._sync_send_button()
        self.message_actions = MessageActions(self.session, self.transcript, self)
        self.message_actions.intent.connect(self.apply)
        self.message_actions.read_aloud.connect(self._read_aloud)
        self.refusals = RefusalView(self)
        self.refusals.intent.connect(self.apply)

    def _set_tab_order(self) -> None:
        """Tab goes from the system prompt chip (when shown) to the message box and its
        buttons, then the top row and the transcript, and round (Shift+Tab: backwards)."""
        chain: list[QWidget] = [
            self.system_chip,
            self.input,
            self.send_button,
            self.attach_button,
            self.speech.dictation.button,
            self.pending_images.button,
            self.copy_button,
            self.chats_button,
            self.chat_list,
            self.model_picker,
            self.new_button,
            self.settings_button,
            self.menu_button,
            self.transcript,
        ]
        for first, second in itertools.pairwise(chain):
            QWidget.setTabOrder(first, second)
        for widget in (self.chats_button, self.settings_button, self.system_chip):
            widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # tool buttons: Tab reaches them

    def _build_top(self) -> QHBoxLayout:
        self.chats_button = QToolButton()
        self.chats_button.setText("Chats")
        self.chats_button.setCheckable(True)
        self.chats_button.setToolTip("Show earlier chats (rename or delete them there)")
        self.model_picker = QComboBox()
        self.model_picker.setToolTip("The model that answers in this chat")
        self.model_picker.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.model_picker.setMinimumContentsLength(12)
        self.model_picker.activated.connect(self._on_model_picked)
        self.new_button = QPushButton("New chat")
        self.new_button.setToolTip(f"Start a new chat ({_keys(NEW_CHAT_KEYS)})")
        self.new_button.clicked.connect(self.new_action.trigger)
        self.settings_button = QToolButton()
        self.settings_button.setText("Chat settings")
        self.settings_button.setToolTip(
            f"Temperature, max tokens, context and system prompt of this chat "
            f"({_keys(SETTINGS_KEYS)})"
        )
        self.settings_button.clicked.connect(self.settings_action.trigger)
        # A push button, not a tool button: a tool button's instant-popup arrow sits in its
        # corner over the text, while a push button reserves room for it beside the label.
        self.menu_button = QPushButton("More")
        self.menu_button.setToolTip("More: copy the last reply, settings, models, quit")
        self.menu_button.setMenu(self._build_menu())
        top = QHBoxLayout()
        top.addWidget(self.chats_button)
        top.addWidget(self.model_picker, 1)
        top.addWidget(self.new_button)
        top.addWidget(self.settings_button)
        top.addWidget(self.menu_button)
        return top

    def _build_bottom(self) -> QHBoxLayout:
        self.input = PromptEdit()
        self.input.setPlaceholderText("Message (Enter sends, Shift+Enter for a new line)")
        self.input.setFixedHeight(72)
        self.input.submitted.connect(self.send)
        self.send_button = QPushButton("Send")
        self.send_button.setDefault(True)
        self.send_button.clicked.connect(self._on_send_clicked)
        self.copy_button = QPushButton("Copy reply")
        self.copy_button.setToolTip(f"Copy the last reply ({_keys(COPY_KEYS)})")
        self.copy_button.clicked.connect(self.copy_action.trigger)
        self.input.setToolTip(
            f"Your message ({_keys(FOCUS_KEYS)} comes back here; Tab moves on, "
            f"{_keys(STOP_KEYS)} stops a reply)"
        )
        self.attach_button = QPushButton("Attach…")
        self.attach_button.setToolTip(
            f"Attach a text file ({_keys(ATTACH_KEYS)}); paste code as a file with "
            f"{_keys(PASTE_KEYS)}"
        )
        self.attach_button.clicked.connect(self.attach_action.trigger)
        self.pending_attachments = PendingAttachments(
            self.controller, self.tasks, model=lambda: self.chat_model
        )
        self.pending_attachments.refused.connect(lambda text: self.notice.show_notice(text, []))
        self.pending_images.install(self.input, self)
        # The system prompt costs no row of its own: a chip above the message box while
        # the chat has one, nothing while it has none (the More menu adds one).
        self.system_chip = QToolButton()
        self.system_chip.setAutoRaise(True)
        self.system_chip.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)
        self.system_chip.clicked.connect(self.system_action.trigger)
        self.system_chip.hide()
        side = QVBoxLayout()
        side.addWidget(self.send_button)
        side.addWidget(self.copy_button)
        side.addWidget(self.attach_button)
        # Dictation and Read aloud (built here: the Dictate control sits under the box).
        self.speech = ChatSpeech(
            self.controller, self.tasks, self.input, self.notice, self.transcript, self
        )
        self.speech.open_catalog.connect(self.open_catalog)
        side.addWidget(self.pending_images.button)
        side.addStretch(1)
        column = QVBoxLayout()
        column.addWidget(self.system_chip, 0, Qt.AlignmentFlag.AlignLeft)
        column.addWidget(self.pending_attachments)
        column.addWidget(self.pending_images)
        column.addWidget(self.input, 1)
        column.addWidget(self.speech.dictation)
        bottom = QHBoxLayout()
        bottom.addLayout(column, 1)
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
        self.settings_action = action("Chat settings…", SETTINGS_KEYS, self.edit_settings)
        self.system_action = QAction("Add a system prompt…", self)
        self.system_action.triggered.connect(lambda: self.edit_settings(focus_prompt=True))
        self.attach_action = action("Attach a text file…", ATTACH_KEYS, self.attach_file)
        self.paste_action = action("Paste as an attachment", PASTE_KEYS, self.paste_attachment)
        self.pending_images = PendingImages(
            self.controller, lambda: self.chat_model, self._images_sent
        )
        self.pending_images.refused.connect(lambda text: self.notice.show_notice(text, []))

    def _build_menu(self) -> QMenu:
        menu = QMenu(self)
        menu.addAction(self.stop_action)  # the menu shows each entry's shortcut beside it
        menu.addAction(self.focus_action)
        menu.addSeparator()
        menu.addAction(self.copy_action)
        menu.addAction(self.new_action)
        menu.addAction(self.settings_action)
        menu.addAction(self.system_action)
        menu.addAction(self.attach_action)
        menu.addAction(self.paste_action)
        menu.addAction(self.pending_images.attach_action)
        self._tools_end = menu.addSeparator()  # Dictate goes before it (built later)
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
        """Esc undoes the nearest thing first: a dictation or a reading, an edit, then a
        reply, then the window."""
        if self.speech.cancel():
            return
        if self.session.editing is not None:
            self.apply(CancelEdit())
        elif self.busy:
            self.stop()
        elif self.escape_hides:
            self.hide()
        else:
            self.showMinimized()

    # ---- the session's state, as the window's attributes ---------------------------------

    @property
    def conversation(self) -> Conversation:
        return self.session.conversation

    @property
    def busy(self) -> bool:
        return self.session.busy

    @property
    def last_stats(self) -> ReplyStats | None:
        return self.session.last_stats

    @property
    def last_reply(self) -> str | None:
        """The last assistant message of this conversation: its answer alone (no thinking,
        no tool calls, no marker)."""
        return self.session.last_reply

    @property
    def chunks_received(self) -> int:
        """The pieces the current (or last) reply arrived in."""
        reply = self.session.reply
        return 0 if reply is None else reply.chunks

    @property
    def reply_thinking(self) -> str:
        """The current (or last) reply's thinking."""
        reply = self.session.reply
        return "" if reply is None else reply.reasoning

    @property
    def reply_calls(self) -> tuple[ToolCall, ...]:
        """The current (or last) reply's tool calls."""
        reply = self.session.reply
        return () if reply is None else reply.calls

    @property
    def _pending(self) -> str | None:
        """The text of the reply still streaming (None when none is)."""
        reply = self.session.reply
        return reply.content if reply is not None and self.session.busy else None

    @_pending.setter
    def _pending(self, text: str | None) -> None:
        """Draw ``text`` as a reply still streaming (tests and screenshots); None ends it."""
        model = self.chat_model
        self.session.reply = None if text is None else Reply(model or "Assistant", content=text)

    # ---- sending and streaming ---------------------------------------------------------

    def send(self, text: str | None = None) -> None:
        """Send ``text`` (default: the message box) and stream the reply."""
        text = (self.input.toPlainText() if text is None else text).strip()
        attached, images = self.pending_attachments, self.pending_images
        if not (text or attached.items or images.items) or self.busy:
            return
        if attached.counting:
            self.notice.show_notice("Counting the attachment's tokens; send again in a moment.", [])
            return
        cannot_see = images.cannot_see() if images.items else None
        if cannot_see is not None:
            self.notice.show_notice(f"Not sent: {cannot_see}", [])
            return
        self.notice.dismiss()
        self.input.clear()
        message = ChatMessage(role="user", content=text)
        if attached.items:
            message["attachments"] = attached.take()
        if images.items:
            message["images"] = images.take(self.history.folder, self.conversation.id)
        self.session.send(message)  # replaces the message being edited, if any
        self.start_reply()

    def stop(self) -> None:
        """Stop the reply in the engine; what arrived so far is kept."""
        if self._job is not None and self.session.stop():
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

    def start_reply(self) -> None:
        """Answer the conversation as it stands (its own settings applied)."""
        session = self.session
        model = self.chat_model
        try:
            messages, images = engine_request(self.conversation, self.history.folder)
        except APIError as exc:  # an image's file is gone: the message shows as not sent
            session.start_reply(model)
            self._on_error(exc)
            self._on_done()
            return
        job = ReplyJob(
            self.controller.pipeline,
            model,
            messages,
            session.reply_options(self.options),
            images,
            model_context=self._model_context(model),
        )
        worker = self.tasks.stream(job.events)
        worker.yielded.connect(self._on_event)
        worker.errored.connect(self._on_error)
        worker.done.connect(self._on_done)
        self._job, self._worker = job, worker
        session.start_reply(model)
        self._sync_send_button()
        self.status_strip.set_generating(True)
        self._sync_title()
        self._render()
        worker.start()

    def _sync_send_button(self) -> None:
        self.stop_action.setEnabled(self.busy)
        if self.busy:
            self.send_button.setText("Stop")
            self.send_button.setToolTip(f"Stop the reply (Esc or {_keys(STOP_KEYS)})")
        else:
            self.send_button.setText("Send")
            self.send_button.setToolTip(
                f"Send the message (Enter); while a reply runs, this button stops it "
                f"(Esc or {_keys(STOP_KEYS)})"
            )

    def _on_event(self, event: ChatEvent) -> None:
        update = self.session.apply(event)
        if update.thinking:
            self.thinking_received.emit(update.thinking)
        reply = self.session.reply
        if update.streamed and reply is not None:
            self.status_strip.set_rate(reply.rate.tokens_per_second, reply.rate.ttft_seconds)
            if not self._render_timer.isActive():
                self._render_timer.start()
        if update.calls:
            self.tool_calls_received.emit(update.calls)

    def _on_error(self, exc: object) -> None:
        """The model refused the message before answering: it leaves the conversation."""
        self.session.fail(exc)

    def _on_done(self) -> None:
        finished = self.session.finish()
        stats = finished.stats
        if stats is not None:  # a failure arrived through _on_error instead
            self.status_strip.set_rate(stats.tokens_per_second, stats.ttft_seconds)
            self.status_strip.set_speculation(
                stats.speculation, stats.accepted_tokens, stats.completion_tokens
            )
        self._job = self._worker = None
        self._sync_send_button()
        self.send_button.setEnabled(True)
        self.status_strip.set_generating(False)
        self.status_strip.sample()
        self._render_timer.stop()
        self._render()
        self.history.save(self.conversation)
        self._sync_history()
        if finished.keep_dropping:
            self.apply(DropOldest())  # retrying with fewer turns: the reply has not finished
            return
        if finished.refusal is not None and finished.notice is not None:
            text, actions = self.refusals.notice(
                finished.refusal, finished.notice, finished.reply_index
            )
            self.notice.show_notice(text, actions)
            # An engine crash's notice goes once the engine is back (_on_engine_status).
            self._crash_notice = text if finished.notice == "interrupted" else None
            # The notice takes room from the transcript: keep the refused message in view.
            QTimer.singleShot(0, self.transcript.scroll_to_end)
        self.reply_finished.emit(stats)

    def _render(self, *, to_end: bool = False) -> None:
        pending = None
        reply = self.session.reply
        if reply is not None and self.busy:
            pending = Pending(reply.content, reply.model, reply.reasoning, reply.clock.seconds)
        self.transcript.show_conversation(
            self.conversation.messages,
            pending,
            fallback_model=self.conversation.model or "Assistant",
            to_end=to_end,
        )

    def after_messages_changed(self) -> None:
        """Messages were taken out of the chat: save (or forget an emptied chat), redraw."""
        if self.conversation.messages:
            self.history.save(self.conversation)
        else:
            self.history.delete(self.conversation.id)  # nothing left worth keeping
        self._sync_history()
        self._render()
        self._sync_title()
        self.focus_input()

    # ---- intents: the message actions' and the refusal notice's ------------------------

    def apply(self, intent: Intent) -> None:
        """Carry out what the message actions or the refusal notice asked, through the
        session, and show what changed."""
        session = self.session
        if isinstance(intent, Regenerate):
            if session.regenerate(intent.index):
                self.notice.dismiss()
                self.start_reply()
        elif isinstance(intent, ShowVersion):
            if session.show_version(intent.index, intent.step):
                self.history.save(self.conversation, touch=False)
                self._render()
        elif isinstance(intent, Edit):
            started = session.begin_edit(intent.index)
            if started is not None:
                self.input.setPlainText(started.text)
                self.pending_attachments.set(list(started.attachments))
                images = self.conversation.messages[intent.index].get("images", [])
                self.pending_images.restore(images, self.history.folder)
                self.notice.show_notice(*self.message_actions.edit_notice(started))
                self.focus_input()
        elif isinstance(intent, CancelEdit):
            if session.cancel_edit():
                self._clear_edit()
        elif isinstance(intent, Delete):
            deleted = session.delete(intent.index)
            if deleted is not None:
                if deleted.edit_cancelled:
                    self._clear_edit()
                self.after_messages_changed()
        else:
            self._apply_to_refused(intent)

    def _apply_to_refused(
        self, intent: Retry | DropOldest | EditFailed | RemoveFailed | NewChat
    ) -> None:
        session = self.session
        if not isinstance(intent, RemoveFailed):  # its images go along with its text
            self._carry_failed_images()
        if isinstance(intent, Retry):
            text = session.retry()
            if text is not None:
                self.send(text)
        elif isinstance(intent, DropOldest):
            dropped = session.drop_oldest(intent.turns)
            if dropped.resend is not None:
                self.send(dropped.resend)  # while it does not fit, the next oldest goes too
            elif dropped.turns:
                self._render()
        elif isinstance(intent, EditFailed):
            text = session.take_failed()
            if text is not None:
                self.input.setPlainText(text)
                self.after_messages_changed()
        elif isinstance(intent, RemoveFailed):
            if session.take_failed() is not None:
                self.after_messages_changed()
        else:
            text = session.new_chat_with_failed()
            if text is not None:
                self.history.save(self.conversation)
                self.new_chat()
                self.input.setPlainText(text)

    def _carry_failed_images(self) -> None:
        """The refused message's images back as chips, to go with its text."""
        carried = failed_images(self.conversation)
        if carried and not self.busy:
            self.pending_images.restore(carried, self.history.folder)

    def _clear_edit(self) -> None:
        """The edit ended: its text and attachments leave the message box."""
        self.input.clear()
        self.pending_attachments.set([])
        self.pending_images.clear()
        self.notice.dismiss()

    # ---- conversations -----------------------------------------------------------------

    def new_chat(self) -> None:
        if self.busy:
            self.stop()
            return  # the reply ends first; press again for a fresh chat
        self._show(self.session.new_conversation())
        self.input.setFocus()

    def open_conversation(self, conversation_id: str) -> None:
        """Show a saved conversation (not while a reply runs)."""
        conversation = None if self.busy else self.history.get(conversation_id)
        if conversation is None:
            self._sync_history()
            return
        self._show(conversation)

    def _show(self, conversation: Conversation) -> None:
        """Show ``conversation`` with its own settings and system prompt."""
        self.apply(CancelEdit())
        self.session.show(conversation)
        self._sync_system_chip()
        self.transcript.forget_toggles()
        self.notice.dismiss()
        self.status_strip.reset_reply()
        self._render(to_end=True)
        self._sync_history()
        self._sync_title()
        self._missing_said = None  # a model gone since is said each time the chat opens
        self._sync_models()  # its own model back in the picker (or why not)

    def _sync_system_chip(self) -> None:
        """The chip says the chat's system prompt by its first words (all of it in the
        tooltip); hidden while there is none. The menu entry adds or edits it."""
        prompt = " ".join(self.conversation.system_prompt.split())
        self.system_chip.setVisible(bool(prompt))
        self.system_action.setText("Edit the system prompt…" if prompt else "Add a system prompt…")
        if not prompt:
            return
        self.system_chip.setText(f"System: {system_prompt_preview(prompt)}")
        self.system_chip.setToolTip(f"{prompt}\n\nClick to change this chat's system prompt")

    def edit_settings(self, focus_prompt: bool = False) -> None:
        """This chat's generation settings and system prompt (saved with the chat);
        ``focus_prompt`` opens it in the system prompt field (the chip, the menu entry)."""
        dialog = ChatSettingsDialog(
            self.conversation.settings, self.conversation.system_prompt, self
        )
        self.settings_dialog = dialog
        if focus_prompt:
            dialog.prompt.setFocus()
        if dialog.exec() == ChatSettingsDialog.DialogCode.Accepted:
            self.conversation.settings = dialog.settings()
            self.conversation.system_prompt = dialog.system_prompt()
            self._sync_system_chip()
            self.history.save(self.conversation, touch=False)

    def attach_file(self) -> None:
        if self.pending_attachments.pick_file():
            self.input.setFocus()

    def paste_attachment(self) -> None:
        earlier = sum(len(m.get("attachments", [])) for m in self.conversation.messages)
        self.pending_attachments.paste(earlier)

    def _images_sent(self) -> int:
        return images_sent(self.conversation)

    def _on_renamed(self, conversation_id: str) -> None:
        if conversation_id == self.conversation.id:
            saved = self.history.get(conversation_id)
            self.conversation.name = saved.name if saved else None
            self._sync_title()

    def _on_deleted(self, conversation_id: str) -> None:
        if conversation_id == self.conversation.id and not self.busy:
            self._show(self.session.new_conversation())

    def _sync_history(self) -> None:
        self.chat_list.refresh(self.conversation.id)

    def _sync_title(self) -> None:
        self.setWindowTitle(f"{self.conversation.title} — Sidelight")

    # ---- model picker ------------------------------------------------------------------

    def _model_context(self, model: str | None) -> int | None:
        """``model``'s context length while it is loaded (None: not known yet)."""
        loaded = (m for m in self.controller.loaded_models() if m.id == model)
        return next((m.context_length for m in loaded), None)

    @property
    def chat_model(self) -> str | None:
        """The model that answers in this chat: the one it was picked (or last answered)
        with, while it is installed; else (a new chat, a model removed since) the default
        model, the tray's (or the remote model picked in the tray)."""
        wanted = self.conversation.model
        if wanted and self.controller.choice(wanted) is not None:
            return wanted
        return self.controller.chat_default_id

    def _sync_models(self, *_: object) -> None:
        """Fill the picker and show this chat's model in it; a model the chat used that is
        no longer installed is said once in the notice bar, with the model answering
        instead."""
        picker = self.model_picker
        picker.blockSignals(True)
        picker.clear()
        choices = self.controller.models()
        for choice in choices:
            picker.addItem(choice.label, choice.id)
        # The replies' headers name each model as the picker does.
        self.transcript.set_model_names({choice.id: choice.label for choice in choices})
        model = self.chat_model
        index = picker.findData(model) if model else -1
        if index >= 0:
            picker.setCurrentIndex(index)
        picker.blockSignals(False)
        default = self.controller.active_model_id
        state = self.controller.status.state
        picker.setToolTip(
            f"The model that answers in this chat: {model or 'none'} (picking one here "
            f"changes only this chat; the default model, {default or 'none'}, is {state})"
        )
        wanted = self.conversation.model
        if wanted and wanted != model and self._missing_said != (self.conversation.id, wanted):
            self._missing_said = (self.conversation.id, wanted)
            instead = self.controller.choice(model)
            self.notice.show_notice(
                f"{wanted}, the model this chat used, is no longer installed; "
                f"{instead.label if instead else 'no model'} answers instead "
                "(pick another above).",
                [],
            )
        self.pending_images.sync()  # attaching images greys out for a model that cannot see
        self.transcript.set_intro(intro_for(self.controller.choice(model)))

    def _read_aloud(self, index: int) -> None:
        """Read reply ``index`` aloud (the version shown; again: stop)."""
        messages = self.session.messages
        if 0 <= index < len(messages):
            self.speech.read(index, messages[index]["content"])

    def _on_starter(self, prompt: str) -> None:
        """A starter prompt of the empty chat: into the message box, to edit or send."""
        self.input.setPlainText(prompt)
        self.input.moveCursor(QTextCursor.MoveOperation.End)
        self.input.setFocus()

    def _on_model_picked(self, index: int) -> None:
        """This chat's model: remembered with the chat, never the default model's switch."""
        model_id = self.model_picker.itemData(index)
        if not model_id or self.busy:
            self._sync_models()
            return
        if model_id != self.conversation.model:
            self.conversation.model = str(model_id)
            if self.conversation.messages:
                self.history.save(self.conversation, touch=False)
        self._sync_models()
