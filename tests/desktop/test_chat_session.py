"""The chat session's transitions without Qt (plain pytest, no window, no engine): sending,
a reply's events taken in, stop, regenerate, edit-and-resend, delete, a refused message and
what can be done about it, dropping the oldest turns until the message fits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from desktop.chat import ChatOptions, ReplyDelta, ReplyDone, ReplyStats
from desktop.chat_session import (
    CONTEXT_EXCEEDED,
    ChatSession,
    Deleted,
    Dropped,
    EditStarted,
    Refusal,
)
from desktop.history import Attachment, ChatMessage, ChatSettings, Conversation
from engine.parsing import ToolCall
from engine.server.errors import APIError
from engine.worker.messages import SamplingParams

SESSION_MODULE = Path(__file__).resolve().parents[2] / "desktop" / "chat_session.py"


def stats(reason: str = "stop", tokens: int = 3) -> ReplyStats:
    return ReplyStats(
        completion_tokens=tokens, tokens_per_second=12.5, ttft_seconds=0.1, finish_reason=reason
    )


def answer(session: ChatSession, *pieces: str, reason: str = "stop", thinking: str = "") -> None:
    """Run one reply through the session: its deltas, its end, then finish."""
    session.start_reply("tiny")
    if thinking:
        session.apply(ReplyDelta(thinking=thinking, tokens=1))
    for piece in pieces:
        session.apply(ReplyDelta(text=piece, tokens=1))
    session.apply(ReplyDone(stats(reason, len(pieces)), "".join(pieces), thinking, ()))
    session.finish()


def chat(*turns: tuple[str, str]) -> ChatSession:
    """A session holding ``turns`` (question, answer) already."""
    session = ChatSession()
    for question, reply in turns:
        session.messages.append(ChatMessage(role="user", content=question))
        session.messages.append(ChatMessage(role="assistant", content=reply, model="tiny"))
    return session


def refuse(session: ChatSession, text: str, code: str | None = CONTEXT_EXCEEDED) -> None:
    session.send(ChatMessage(role="user", content=text))
    session.start_reply("tiny")
    session.fail(APIError(400, "too long", code=code))


def test_the_session_module_imports_no_qt() -> None:
    script = (
        "import sys, desktop.chat_session\n"
        "qt = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'shiboken6')]\n"
        "print(','.join(qt))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
    assert "PySide6" not in SESSION_MODULE.read_text(encoding="utf-8")


def test_a_reply_streams_then_joins_the_conversation() -> None:
    session = ChatSession()
    assert session.send(ChatMessage(role="user", content="Hello")) == 0
    reply = session.start_reply("tiny")
    assert session.busy and reply.state == "streaming" and reply.model == "tiny"

    first = session.apply(ReplyDelta(thinking="Greet.", tokens=1))
    assert first.streamed and first.thinking == "Greet."
    session.apply(ReplyDelta(text="Hi", tokens=1))
    session.apply(ReplyDelta(text=" there", tokens=1))
    call = ToolCall(id="c1", name="lookup", arguments='{"q": "x"}')
    end = session.apply(ReplyDone(stats("tool_calls"), "Hi there", "Greet.", (call,)))
    assert end.ended and end.calls == (call,) and not end.streamed
    assert (reply.content, reply.reasoning, reply.chunks) == ("Hi there", "Greet.", 3)
    assert session.busy  # until the stream itself ends
    assert reply.finish_reason == "tool_calls"

    finished = session.finish()
    assert not session.busy and reply.state == "answered"
    assert finished.stats == stats("tool_calls") == session.last_stats
    assert (finished.refusal, finished.notice, finished.keep_dropping) == (None, None, False)
    message = session.messages[-1]
    assert message["role"] == "assistant" and message["content"] == "Hi there"
    assert message.get("model") == "tiny" and message.get("thinking") == "Greet."
    assert message.get("thinking_seconds", -1) >= 0
    assert message.get("calls") == [{"id": "c1", "name": "lookup", "arguments": '{"q": "x"}'}]
    assert message.get("figures") == {"tokens": 3, "tokens_per_second": 12.5, "ttft_seconds": 0.1}
    assert "stopped" not in message
    assert session.conversation.model == "tiny" and session.last_reply == "Hi there"
    # The reply stays readable once it finished; late events change nothing.
    assert session.apply(ReplyDelta(text="late")).streamed is False
    assert reply.content == "Hi there"


def test_stop_marks_the_reply_and_a_cancelled_one_is_kept_as_stopped() -> None:
    session = ChatSession()
    assert not session.stop()  # nothing runs
    session.send(ChatMessage(role="user", content="Count"))
    reply = session.start_reply(None)
    assert reply.model == "Assistant"
    session.apply(ReplyDelta(text="one", tokens=1))
    assert session.stop() and reply.stop_requested
    session.apply(ReplyDone(stats("cancelled", 1), "one", "", ()))
    session.finish()
    assert session.messages[-1].get("stopped") is True
    assert session.messages[-1]["content"] == "one"


def test_the_chats_own_settings_shape_the_reply_options() -> None:
    base = ChatOptions(max_tokens=100, sampling=SamplingParams(temperature=0.7, seed=3))
    session = ChatSession()
    assert session.reply_options(base) == base
    session.conversation.settings = ChatSettings(temperature=0.0, max_tokens=5, context_limit=60)
    options = session.reply_options(base)
    assert (options.max_tokens, options.context_limit) == (5, 60)
    assert (options.sampling.temperature, options.sampling.seed) == (0.0, 3)


def test_regenerate_replaces_the_last_reply_or_asks_an_earlier_question_again() -> None:
    session = chat(("Hello", "Hi"), ("More", "Sure"))
    assert not session.regenerate(0)  # not a reply
    assert not session.regenerate(9)
    assert session.regenerate(3)
    assert [m["content"] for m in session.messages] == ["Hello", "Hi", "More"]

    session = chat(("Hello", "Hi"), ("More", "Sure"))
    assert session.regenerate(1)
    messages = session.messages
    assert [m.get("dropped", False) for m in messages] == [True] * 4 + [False]
    assert messages[-1] == {"role": "user", "content": "Hello"}
    assert session.conversation.engine_messages() == [{"role": "user", "content": "Hello"}]

    session.start_reply("tiny")
    assert not session.regenerate(1)  # never while a reply runs


def test_regenerating_the_last_reply_keeps_each_version_and_sends_the_one_shown() -> None:
    session = chat(("Hello", "Hi"))
    assert session.regenerate(1)
    assert [m["content"] for m in session.messages] == ["Hello"]  # not sent again
    answer(session, "Hey", " there")
    reply = session.messages[1]
    assert [v["content"] for v in reply.get("versions", [])] == ["Hi", "Hey there"]
    assert (reply["content"], reply.get("version")) == ("Hey there", 1)
    assert session.regenerate(1)
    answer(session, "Yo")
    assert [v["content"] for v in session.messages[1].get("versions", [])] == [
        "Hi",
        "Hey there",
        "Yo",
    ]
    assert not session.show_version(1, 1)  # already the newest
    assert session.show_version(1, -2)
    assert session.messages[1]["content"] == "Hi"
    assert session.conversation.engine_messages()[1] == {"role": "assistant", "content": "Hi"}
    assert not session.show_version(1, -1) and not session.show_version(0, 1)

    # A regenerate the model refuses keeps the versions there were; the question stays sent.
    assert session.regenerate(1)
    session.start_reply("tiny")
    session.fail(APIError(503, "engine busy"))
    session.finish()
    roles = [m["role"] for m in session.messages]
    assert roles == ["user", "assistant", "error"]
    assert not session.messages[0].get("failed", False)
    assert len(session.messages[1].get("versions", [])) == 3


def test_versions_round_trip_through_the_history(tmp_path: Path) -> None:
    from desktop.history import ChatHistory

    session = chat(("Hello", "Hi"))
    session.regenerate(1)
    answer(session, "Hey")
    session.show_version(1, -1)
    history = ChatHistory(tmp_path)
    history.save(session.conversation)
    reopened = history.get(session.conversation.id)
    assert reopened is not None
    reply = reopened.messages[1]
    assert (reply["content"], reply.get("version")) == ("Hi", 0)
    assert [v["content"] for v in reply.get("versions", [])] == ["Hi", "Hey"]


def test_edit_and_resend_replaces_the_last_message_or_continues_from_an_earlier_one() -> None:
    notes = Attachment(name="a.txt", size=3, tokens=1, text="abc")
    session = chat(("Hello", "Hi"))
    session.messages.append(ChatMessage(role="user", content="More", attachments=[notes]))
    assert session.begin_edit(1) is None  # a reply is not edited
    started = session.begin_edit(2)
    assert started == EditStarted(2, "More", (notes,), later=0)
    assert session.editing == 2
    session.send(ChatMessage(role="user", content="More, please"))
    assert session.editing is None
    assert [m["content"] for m in session.messages] == ["Hello", "Hi", "More, please"]

    session = chat(("Hello", "Hi"), ("More", "Sure"))
    started = session.begin_edit(0)
    assert started is not None and started.later == 3
    assert session.cancel_edit() and not session.cancel_edit()
    assert session.send(ChatMessage(role="user", content="Extra")) == 4  # no edit any more
    session.messages.pop()

    session.begin_edit(0)
    session.send(ChatMessage(role="user", content="Hello!"))
    assert [m.get("dropped", False) for m in session.messages] == [True] * 4 + [False]
    assert session.conversation.engine_messages() == [{"role": "user", "content": "Hello!"}]


def test_delete_takes_a_refused_messages_errors_along_and_ends_an_edit() -> None:
    session = chat(("Hello", "Hi"))
    refuse(session, "too long", code=None)
    session.finish()
    assert [m["role"] for m in session.messages] == ["user", "assistant", "user", "error"]
    session.begin_edit(0)
    assert session.delete(2) == Deleted(2, 4, edit_cancelled=True)
    assert session.editing is None
    assert session.delete(5) is None
    assert session.delete(1) == Deleted(1, 2, edit_cancelled=False)
    assert [m["content"] for m in session.messages] == ["Hello"]


def test_a_refused_message_is_not_sent_and_the_notice_fits_the_reason() -> None:
    session = ChatSession()
    refuse(session, "word " * 10)
    assert session.busy
    finished = session.finish()
    assert finished.stats is None and finished.notice == "too_long"
    assert finished.refusal == Refusal("too long", CONTEXT_EXCEEDED)
    assert session.reply is not None and session.reply.state == "failed"
    failed, error = session.messages
    assert failed.get("failed") is True and error == {"role": "error", "content": "too long"}
    assert session.conversation.engine_messages() == []

    session = chat(("Hello", "Hi"))
    refuse(session, "Tell me more")
    assert session.finish().notice == "outgrew"

    session = chat(("Hello", "Hi"))
    session.send(ChatMessage(role="user", content="Again"))
    session.start_reply(None)
    assert session.fail(RuntimeError("boom")) == Refusal("the reply failed: boom")
    finished = session.finish()
    assert finished.notice == "not_answered"


def test_retry_edit_remove_and_new_chat_take_the_refused_message_out() -> None:
    session = chat(("Hello", "Hi"))
    refuse(session, "Again", code="engine_idle")
    assert session.retry() is None  # not while the failed reply is still ending
    session.finish()
    assert session.retry() == "Again"
    assert [m["content"] for m in session.messages] == ["Hello", "Hi"]
    assert session.retry() is None  # nothing refused waits any more

    refuse(session, "Again")
    session.finish()
    assert session.new_chat_with_failed() == "Again"
    assert session.take_failed() is None


def test_drop_oldest_retries_until_the_message_fits() -> None:
    session = chat(("long one", "long reply"), ("long two", "long reply"), ("Hi", "Hello"))
    refuse(session, "Short")
    finished = session.finish()
    assert finished.notice == "outgrew" and not session.dropping

    dropped = session.drop_oldest()
    assert dropped == Dropped(1, "Short") and session.dropping
    assert [m.get("dropped", False) for m in session.messages] == [True] * 2 + [False] * 4
    # Sent again, still too long: the session asks for the next oldest turn to go.
    refuse(session, dropped.resend or "")
    finished = session.finish()
    assert finished.keep_dropping and finished.notice is None and session.dropping
    dropped = session.drop_oldest()
    assert dropped == Dropped(1, "Short")
    session.send(ChatMessage(role="user", content="Short"))
    answer(session, "Fine")
    assert not session.dropping
    assert [m.get("dropped", False) for m in session.messages] == [True] * 4 + [False] * 4

    # Nothing left to drop: nothing happens; dropped turns with no refused message: no resend.
    empty = ChatSession()
    assert empty.drop_oldest() == Dropped(0, None)
    two = chat(("a", "b"), ("c", "d"))
    assert two.drop_oldest(turns=5) == Dropped(2, None) and not two.dropping


def test_a_new_conversation_starts_from_the_defaults_and_showing_one_resets_the_figures() -> None:
    """Settings are per chat (issue 28): a new chat never inherits the one shown."""
    session = chat(("Hello", "Hi"))
    session.conversation.settings = ChatSettings(max_tokens=7, temperature=0.2)
    session.conversation.system_prompt = "Be brief."
    answer(session, "a", "b")
    assert session.last_stats is not None
    fresh = session.new_conversation()
    assert fresh.system_prompt == "" and fresh.messages == []
    assert fresh.settings == ChatSettings()
    defaults = ChatSettings(temperature=0.5)
    preset = ChatSession(defaults=defaults, system_prompt="Answer in French.")
    assert preset.conversation.settings == defaults
    assert preset.conversation.settings is not defaults  # a chat's changes stay its own
    assert preset.new_conversation().system_prompt == "Answer in French."
    session.begin_edit(0)
    session.show(fresh)
    assert session.conversation is fresh
    assert session.reply_options(ChatOptions()).max_tokens is None
    assert session.last_stats is None and session.editing is None
    assert session.last_reply is None and session.last_index("user") is None


def test_a_session_can_start_on_a_saved_conversation() -> None:
    saved = Conversation(messages=[ChatMessage(role="user", content="Hi")])
    assert ChatSession(saved).conversation is saved
    assert ChatSession().messages == []


def test_a_reply_cut_by_max_tokens_is_marked_with_its_tokens() -> None:
    session = ChatSession()
    session.send(ChatMessage(role="user", content="Count"))
    session.start_reply("m")
    session.apply(ReplyDelta(text="one two", tokens=5))
    stats = ReplyStats(5, 10.0, 0.1, "length")
    session.apply(ReplyDone(stats, "one two", "", ()))
    session.finish()
    reply = session.messages[-1]
    assert reply.get("cut_at") == 5 and reply["content"] == "one two"
    assert "stopped" not in reply
