"""What the chat offers when the model refuses a message: edit it, remove it, try again,
and when the chat outgrew the context (the model's, or the chat's own limit): drop the oldest
turns (kept on screen, greyed out, no longer sent) or start a new chat with the message.
Never a locked conversation.

A mixin of :class:`desktop.views.chat_window.ChatWindow`. Threading: GUI thread only.
"""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QPlainTextEdit

from desktop.history import ChatHistory, Conversation, sent_to_model
from desktop.views.notice import NoticeAction, NoticeBar
from desktop.views.transcript import TranscriptView

CONTEXT_EXCEEDED = "context_length_exceeded"


class RefusedMessages:
    """The refused-message half of the chat window (it supplies the attributes below)."""

    conversation: Conversation
    history: ChatHistory
    notice: NoticeBar
    input: QPlainTextEdit
    transcript: TranscriptView
    _dropping: bool

    @property
    def busy(self) -> bool:
        raise NotImplementedError

    def send(self, text: str | None = None) -> None:
        raise NotImplementedError

    def new_chat(self) -> None:
        raise NotImplementedError

    def after_messages_changed(self) -> None:
        raise NotImplementedError

    def _render(self, *, to_end: bool = False) -> None:
        raise NotImplementedError

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
            self.after_messages_changed()

    def remove_failed(self) -> None:
        if self.conversation.take_failed() is not None:
            self.after_messages_changed()

    def new_chat_with_failed(self) -> None:
        text = self.conversation.take_failed()
        if text is None or self.busy:
            return
        self.history.save(self.conversation)
        self.new_chat()
        self.input.setPlainText(text)
