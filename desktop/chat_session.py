"""The chat window's state without its widgets: the conversation, the reply in progress, the
message being edited, and every transition between them (issue 21).

:class:`ChatSession` is what the chat window shows and what its parts ask to change. The
message actions and the refusal notice no longer edit the window: they emit an *intent*
(:data:`Intent`, small frozen dataclasses), the window applies it through the session, and the
session's method says what changed so the window can redraw, save or send. Keeping this
Qt-free lets its rules (what regenerating an earlier reply does, which turns an edit drops,
when "drop the oldest turns" retries on its own) be tested without a window.

Threading: one thread (the GUI thread) owns a session; nothing here blocks or touches Qt.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from desktop.chat import (
    CONTEXT_EXCEEDED,
    MESSAGE_TOO_LONG,
    ChatEvent,
    ChatOptions,
    LiveRate,
    ReplyDelta,
    ReplyDone,
    ReplyStats,
    ThinkingClock,
    error_text,
)
from desktop.history import (
    Attachment,
    ChatMessage,
    ChatSettings,
    Conversation,
    ReplyFigures,
    Role,
    ToolCallRecord,
    sent_to_model,
    show_version,
    with_new_version,
)
from engine.parsing import ToolCall
from engine.server.errors import APIError

REPLACEMENT = "\ufffd"  # U+FFFD, what a character cut in two decodes to

# ---- intents: what the message actions and the refusal notice ask of the window --------------


@dataclass(frozen=True)
class Regenerate:
    """Answer again the question before reply ``index``."""

    index: int


@dataclass(frozen=True)
class ShowVersion:
    """Show another version of reply ``index``: ``step`` -1 the one before, +1 the next."""

    index: int
    step: int


@dataclass(frozen=True)
class Edit:
    """Take the message ``index`` (typed earlier) back into the message box."""

    index: int


@dataclass(frozen=True)
class CancelEdit:
    """Keep the message being edited as it was."""


@dataclass(frozen=True)
class Delete:
    """Delete message ``index`` (a refused message takes its errors with it)."""

    index: int


@dataclass(frozen=True)
class Retry:
    """Send the refused message again."""


@dataclass(frozen=True)
class DropOldest:
    """Stop sending the ``turns`` oldest turns, then send the refused message again."""

    turns: int = 1


@dataclass(frozen=True)
class EditFailed:
    """Take the refused message out of the chat and back into the message box."""


@dataclass(frozen=True)
class RemoveFailed:
    """Remove the refused message from the chat."""


@dataclass(frozen=True)
class NewChat:
    """Start a new chat carrying the refused message over (into the message box)."""


Intent = (
    Regenerate
    | ShowVersion
    | Edit
    | CancelEdit
    | Delete
    | Retry
    | DropOldest
    | EditFailed
    | RemoveFailed
    | NewChat
)

# ---- the reply in progress ------------------------------------------------------------------

ReplyState = Literal["streaming", "answered", "failed"]
# What the refusal notice offers: the chat outgrew the context (drop turns or start anew), the
# message alone is too long, the model did not answer for another reason (try again), or it
# failed part way through a reply (kept as far as it came; answer again).
RefusalKind = Literal["outgrew", "too_long", "not_answered", "interrupted"]


@dataclass(frozen=True)
class Refusal:
    """Why the model did not answer: the message a person reads, the error's code."""

    message: str
    code: str | None = None


@dataclass
class Reply:
    """One reply: what has streamed so far and how it ended.

    ``finished`` is the engine's end (``None`` while streaming, and for a refused reply);
    ``state`` turns from ``streaming`` once :meth:`ChatSession.finish` has taken it in.
    """

    model: str
    content: str = ""
    reasoning: str = ""
    calls: tuple[ToolCall, ...] = ()
    chunks: int = 0  # deltas received
    finished: ReplyDone | None = None
    refusal: Refusal | None = None
    interrupted: bool = False  # failed after text had streamed: kept as an answer so far
    state: ReplyState = "streaming"
    stop_requested: bool = False
    rate: LiveRate = field(default_factory=LiveRate)
    clock: ThinkingClock = field(default_factory=ThinkingClock)

    @property
    def stats(self) -> ReplyStats | None:
        return None if self.finished is None else self.finished.stats

    @property
    def finish_reason(self) -> str | None:
        stats = self.stats
        return None if stats is None else stats.finish_reason

    @property
    def figures(self) -> ReplyFigures | None:
        stats = self.stats
        if stats is None:
            return None
        return ReplyFigures(
            tokens=stats.completion_tokens,
            tokens_per_second=stats.tokens_per_second,
            ttft_seconds=stats.ttft_seconds,
        )


# ---- what the transitions return ------------------------------------------------------------


@dataclass(frozen=True)
class ReplyUpdate:
    """What one reply event changed: ``streamed`` for a delta (its ``thinking`` piece, if
    any); ``calls`` once the reply ended with tool calls."""

    streamed: bool = False
    thinking: str = ""
    ended: bool = False
    calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class Finished:
    """A reply was taken into the conversation. ``stats`` is ``None`` when it failed before
    answering; then ``refusal`` says why and ``notice`` what to offer, unless
    ``keep_dropping``: the message still does not fit after dropping turns, so the next
    oldest goes too (apply :class:`DropOldest`)."""

    stats: ReplyStats | None
    refusal: Refusal | None = None
    notice: RefusalKind | None = None
    keep_dropping: bool = False
    reply_index: int | None = None  # an interrupted reply's place (to answer it again)


@dataclass(frozen=True)
class EditStarted:
    """The message being edited: its text and attachments go back into the message box;
    ``later`` messages follow it (they are dropped from the context when it is sent)."""

    index: int
    text: str
    attachments: tuple[Attachment, ...]
    later: int


@dataclass(frozen=True)
class Deleted:
    """Messages ``start``..``end`` (exclusive) left the chat; an edit in progress ended."""

    start: int
    end: int
    edit_cancelled: bool


@dataclass(frozen=True)
class Dropped:
    """Turns dropped from the context, and the refused message to send again (``None``: no
    refused message was waiting, only the drop happened)."""

    turns: int
    resend: str | None


class ChatSession:
    """One chat window's conversation and reply, and their transitions.

    A reply runs from :meth:`start_reply` to :meth:`finish` (``busy`` in between); the window
    feeds it the reply's events (:meth:`apply`) or its failure (:meth:`fail`). Every action
    on the messages is refused while busy, as the window's buttons are. ``reply`` stays the
    last reply once it has finished (its thinking and calls are still read).
    """

    def __init__(
        self,
        conversation: Conversation | None = None,
        *,
        defaults: ChatSettings | None = None,
        system_prompt: str = "",
    ) -> None:
        # What a new chat starts from: settings are per chat, never carried from the last.
        self.defaults = defaults or ChatSettings()
        self.default_system_prompt = system_prompt
        self.conversation = conversation or self.new_conversation()
        self.reply: Reply | None = None
        self.editing: int | None = None  # the message whose text is in the message box
        self.dropping = False  # "drop the oldest turns" retries until the message fits
        self.last_stats: ReplyStats | None = None
        # The reply being regenerated, out of the chat while its new version streams: the
        # new one joins it as its latest version, or it comes back when none came.
        self.regenerating: ChatMessage | None = None

    @property
    def messages(self) -> list[ChatMessage]:
        return self.conversation.messages

    @property
    def busy(self) -> bool:
        return self.reply is not None and self.reply.state == "streaming"

    @property
    def last_reply(self) -> str | None:
        """The last assistant message of this conversation: its answer alone (no thinking,
        no tool calls, no marker)."""
        last = self.last_index("assistant")
        return None if last is None else self.messages[last]["content"]

    def last_index(self, role: Role) -> int | None:
        """The index of the last message of ``role``."""
        messages = self.messages
        return next(
            (i for i in range(len(messages) - 1, -1, -1) if messages[i]["role"] == role), None
        )

    # ---- conversations -------------------------------------------------------------------

    def show(self, conversation: Conversation) -> None:
        """Make ``conversation`` the one shown (an edit in progress ends with the old one)."""
        self.conversation = conversation
        self.editing = None
        self.last_stats = None

    def new_conversation(self) -> Conversation:
        """A fresh chat (not yet shown) on the defaults: its temperature, max tokens,
        context limit and system prompt are its own, never the chat shown before."""
        return Conversation(
            system_prompt=self.default_system_prompt, settings=dataclasses.replace(self.defaults)
        )

    # ---- sending and the reply -----------------------------------------------------------

    def send(self, message: ChatMessage) -> int:
        """Add what the person sent; return its index. A message being edited is replaced
        (edit and resend): see :meth:`edit_and_resend`."""
        index, self.editing = self.editing, None
        if index is not None:
            return self.edit_and_resend(index, message)
        self.messages.append(message)
        return len(self.messages) - 1

    def edit_and_resend(self, index: int, message: ChatMessage) -> int:
        """``message`` replaces message ``index``: the last message (or one followed only by
        errors) is simply replaced; an earlier one stays greyed with everything after it,
        no longer sent, and the chat continues from the new one at the end."""
        messages = self.messages
        if index < len(messages):
            if all(m["role"] == "error" for m in messages[index + 1 :]):
                del messages[index:]
            else:
                self._drop_from(index)
        messages.append(message)
        return len(messages) - 1

    def reply_options(self, base: ChatOptions) -> ChatOptions:
        """``base`` with this chat's own settings applied (max tokens, context limit,
        temperature)."""
        chosen = self.conversation.settings
        options = dataclasses.replace(
            base,
            max_tokens=chosen.max_tokens or base.max_tokens,
            context_limit=chosen.context_limit,
        )
        if chosen.temperature is not None:
            sampling = dataclasses.replace(base.sampling, temperature=chosen.temperature)
            options = dataclasses.replace(options, sampling=sampling)
        return options

    def start_reply(self, model: str | None) -> Reply:
        """A reply to the conversation as it stands begins (``model``: who answers)."""
        self.reply = Reply(model=model or "Assistant")
        return self.reply

    def apply(self, event: ChatEvent) -> ReplyUpdate:
        """Take in one event of the running reply."""
        reply = self.reply
        if reply is None or reply.state != "streaming":
            return ReplyUpdate()
        if isinstance(event, ReplyDelta):
            reply.chunks += 1
            reply.content += event.text
            reply.clock.add(event)
            reply.reasoning += event.thinking
            reply.rate.add(event.tokens)
            return ReplyUpdate(streamed=True, thinking=event.thinking)
        reply.clock.stop()
        reply.finished = event
        reply.calls = event.calls
        return ReplyUpdate(ended=True, calls=event.calls)

    def fail(self, error: object) -> Refusal:
        """The model refused the message (or failed before answering anything): the message
        is marked not sent, an error entry follows it, and neither reaches the model again.

        A reply that had already streamed text when it failed (the engine crashed mid-reply)
        was sent and partly answered: the message stays sent, the partial answer is kept,
        marked ``interrupted``, and the error entry follows it."""
        message = error_text(error) if isinstance(error, BaseException) else str(error)
        refusal = Refusal(message, error.code if isinstance(error, APIError) else None)
        reply = self.reply
        if reply is not None and reply.state == "streaming" and (reply.content or reply.reasoning):
            reply.clock.stop()
            partial = ChatMessage(
                role="assistant", content=reply.content, model=reply.model, interrupted=True
            )
            if reply.reasoning:
                partial["thinking"] = reply.reasoning
            self.messages.append(self._as_version(partial))
            self.conversation.model = reply.model
            self.messages.append(ChatMessage(role="error", content=message))
            reply.refusal = refusal
            reply.interrupted = True
            return refusal
        if self.regenerating is not None:  # the question was answered before: that stays
            self.messages.append(self.regenerating)
            self.regenerating = None
        else:
            for entry in reversed(self.messages):
                if entry["role"] == "user":
                    entry["failed"] = True
                    break
        self.messages.append(ChatMessage(role="error", content=message))
        if self.reply is not None:
            self.reply.refusal = refusal
        return refusal

    def stop(self) -> bool:
        """The person asked to stop the reply; False when none runs."""
        if not self.busy or self.reply is None:
            return False
        self.reply.stop_requested = True
        return True

    def finish(self) -> Finished:
        """The reply's stream ended: its answer joins the conversation (a refused one left
        its error there already)."""
        reply = self.reply
        if reply is None:
            return Finished(None)
        reply.state = "answered" if reply.finished is not None else "failed"
        if self.regenerating is not None and reply.finished is None:
            self.messages.append(self.regenerating)  # no new version came: the old one stays
            self.regenerating = None
        stats = None
        if reply.finished is not None:
            self._take_answer(reply, reply.finished)
            stats = self.last_stats = reply.finished.stats
        refusal = reply.refusal
        if refusal is None:
            self.dropping = False
            return Finished(stats)
        older_turns = any(sent_to_model(m) for m in self.messages)
        if refusal.code == CONTEXT_EXCEEDED and self.dropping and older_turns:
            return Finished(stats, refusal, keep_dropping=True)
        self.dropping = False
        if reply.interrupted:
            index = max(i for i, m in enumerate(self.messages) if m["role"] == "assistant")
            return Finished(stats, refusal, "interrupted", reply_index=index)
        kind: RefusalKind = "not_answered"
        if refusal.code == MESSAGE_TOO_LONG:
            kind = "too_long"  # the message alone is over the context: no drop offered
        elif refusal.code == CONTEXT_EXCEEDED:
            kind = "outgrew" if older_turns else "too_long"
        return Finished(stats, refusal, kind)

    def _take_answer(self, reply: Reply, done: ReplyDone) -> None:
        message = ChatMessage(role="assistant", content=reply.content, model=reply.model)
        if done.stats.finish_reason == "cancelled":
            message["stopped"] = True
            # A stop can cut a character's bytes in two: its replacement character goes.
            message["content"] = reply.content.rstrip(REPLACEMENT)
        elif done.stats.finish_reason == "length":
            message["cut_at"] = done.stats.completion_tokens  # shown as "cut at N tokens"
        if done.thinking.strip():  # an empty think block is no thinking to show
            message["thinking"] = done.thinking
            message["thinking_seconds"] = round(reply.clock.seconds or 0.0, 2)
        if done.calls:
            message["calls"] = [
                ToolCallRecord(id=c.id, name=c.name, arguments=c.arguments) for c in done.calls
            ]
        figures = reply.figures
        if figures is not None:
            message["figures"] = figures
        self.messages.append(self._as_version(message))
        self.conversation.model = reply.model

    def _as_version(self, message: ChatMessage) -> ChatMessage:
        """``message`` as the newest version of the reply being regenerated, if one is."""
        former, self.regenerating = self.regenerating, None
        return message if former is None else with_new_version(former, message)

    # ---- the message actions -------------------------------------------------------------

    def show_version(self, index: int, step: int) -> bool:
        """Show the version ``step`` away of reply ``index`` (the chat continues from the
        one shown); False when busy or there is none."""
        messages = self.messages
        if self.busy or not 0 <= index < len(messages):
            return False
        message = messages[index]
        versions = message.get("versions", [])
        number = message.get("version", 0) + step
        if message["role"] != "assistant" or not 0 <= number < len(versions):
            return False
        messages[index] = show_version(message, number)
        return True

    def regenerate(self, index: int) -> bool:
        """Answer again the user message before reply ``index``; True when a reply should
        start now. The last reply gets a new version (the old ones stay, "1/2"); an
        earlier one is kept greyed with everything after it, and the question is asked
        again at the end."""
        messages = self.messages
        if self.busy or not 0 <= index < len(messages) or messages[index]["role"] != "assistant":
            return False
        asked = next((i for i in range(index - 1, -1, -1) if messages[i]["role"] == "user"), None)
        if asked is None:
            return False
        if index == len(messages) - 1:
            self.regenerating = messages.pop(index)
        else:
            question = copy.deepcopy(messages[asked])
            question.pop("dropped", None)
            self._drop_from(asked)
            messages.append(question)
        return True

    def begin_edit(self, index: int) -> EditStarted | None:
        """Message ``index`` (typed earlier) is being edited; sending replaces it."""
        messages = self.messages
        if self.busy or not 0 <= index < len(messages) or messages[index]["role"] != "user":
            return None
        self.editing = index
        message = messages[index]
        return EditStarted(
            index,
            message["content"],
            tuple(message.get("attachments", [])),
            # Errors after it go with it (edit_and_resend): they are not "kept".
            later=sum(1 for m in messages[index + 1 :] if m["role"] != "error"),
        )

    def cancel_edit(self) -> bool:
        """The edit in progress ends, the message kept as it was; False when none was."""
        if self.editing is None:
            return False
        self.editing = None
        return True

    def delete(self, index: int) -> Deleted | None:
        """Delete message ``index`` (a user message takes the errors after it along)."""
        messages = self.messages
        if self.busy or not 0 <= index < len(messages):
            return None
        end = index + 1
        if messages[index]["role"] == "user":
            while end < len(messages) and messages[end]["role"] == "error":
                end += 1
        del messages[index:end]
        return Deleted(index, end, edit_cancelled=self.cancel_edit())

    def _drop_from(self, index: int) -> None:
        for message in self.messages[index:]:
            if message["role"] != "error":
                message["dropped"] = True

    # ---- a refused message ---------------------------------------------------------------

    def take_failed(self) -> str | None:
        """Remove the last refused message (and its errors) from the chat; its text."""
        return self.conversation.take_failed()

    def retry(self) -> str | None:
        """The refused message's text to send again, taken out of the chat (None: busy, or
        no refused message waits)."""
        return None if self.busy else self.take_failed()

    def new_chat_with_failed(self) -> str | None:
        """Take the refused message out of this chat, to carry it into a new one."""
        return None if self.busy else self.take_failed()

    def drop_oldest(self, turns: int = 1) -> Dropped:
        """Drop up to ``turns`` of the oldest turns still sent (kept, greyed) and take the
        refused message out to send again; while it still does not fit, :meth:`finish` asks
        for the next oldest (``keep_dropping``)."""
        if self.busy:
            return Dropped(0, None)
        dropped = 0
        while dropped < turns and self.conversation.drop_oldest_turn():
            dropped += 1
        if dropped == 0:
            return Dropped(0, None)
        text = self.take_failed()
        if text is not None:
            self.dropping = True
        return Dropped(dropped, text)
