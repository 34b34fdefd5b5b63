"""What the chat offers when the model refuses a message: edit it, remove it, try again,
and when the chat outgrew the context (the model's, or the chat's own limit): drop the oldest
turns (kept on screen, greyed out, no longer sent) or start a new chat with the message.
Never a locked conversation.

The view only words the offer: each button emits an intent (:mod:`desktop.chat_session`)
that the chat window applies through its session. Threading: GUI thread only.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from desktop.chat_session import (
    DropOldest,
    EditFailed,
    Intent,
    NewChat,
    Refusal,
    RefusalKind,
    Regenerate,
    RemoveFailed,
    Retry,
)
from desktop.views.notice import NoticeAction


class RefusalView(QObject):
    """The notice for a refused message; its buttons emit ``intent`` (an :data:`Intent`)."""

    intent = Signal(object)

    def notice(
        self, refusal: Refusal, kind: RefusalKind, reply_index: int | None = None
    ) -> tuple[str, list[NoticeAction]]:
        """The notice's text and buttons for ``refusal`` (``kind``: what can be done;
        ``reply_index``: an interrupted reply's place in the chat)."""
        edit = self._action(
            "Edit message", EditFailed(), "Take the message back into the message box"
        )
        remove = self._action("Remove", RemoveFailed(), "Remove the message from the chat")
        if kind == "outgrew":
            return (
                "This chat no longer fits in the model's context, so the model cannot "
                "answer. Drop the oldest turns (they stay here, greyed out), or start a new "
                "chat with this message.",
                [
                    self._action(
                        "Drop oldest turns",
                        DropOldest(),
                        "Stop sending the oldest turns to the model and send the message again",
                    ),
                    self._action("New chat", NewChat(), "Start a new chat with this message"),
                    edit,
                    remove,
                ],
            )
        if kind == "too_long":
            return (
                "This message is longer than the model's context. Shorten it, or split it "
                "into parts.",
                [edit, remove],
            )
        if kind == "interrupted":
            text = f"The reply was cut off: {refusal.message}. What it wrote so far is kept."
            if reply_index is None:
                return text, []
            again = self._action(
                "Answer again",
                Regenerate(reply_index),
                "Replace the cut-off reply with a new one",
            )
            return text, [again]
        retry = self._action("Try again", Retry(), "Send the message again")
        return f"The model did not answer: {refusal.message}", [retry, edit, remove]

    def _action(self, label: str, intent: Intent, tooltip: str) -> NoticeAction:
        return NoticeAction(label, lambda: self.intent.emit(intent), tooltip)
