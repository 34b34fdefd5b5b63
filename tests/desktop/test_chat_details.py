"""Issue 28, defect 12's chat details, each as a person met it:

* "(stopped)" was glued to the reply's last word, and a stop that cut a character in two
  kept its U+FFFD;
* an empty answer from a reasoning model showed an empty *Thought* box;
* the overflow notice offered *Drop oldest turns* when the message alone is too big;
* the crash notice stayed after the engine had recovered;
* the edit notice said "replaces the message" while it is kept, and "the 1 message after it
  stay";
* the message menu had a browser's "Copy Link Location";
* a restart opened a blank chat rather than the last one.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

from PySide6.QtGui import QTextCursor, QTextDocument
from PySide6.QtWidgets import QApplication, QWidget
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.chat import MESSAGE_TOO_LONG, ReplyDelta, ReplyDone
from desktop.chat_session import ChatSession, EditStarted, RemoveFailed
from desktop.history import ChatMessage, Conversation
from desktop.views.chat_window import ChatWindow
from desktop.views.message_actions import MessageActions, editing_notice
from desktop.views.transcript import TranscriptView, boxes_in, render_transcript
from engine.supervisor.states import READY
from tests.desktop.conftest import LONG_REPLY
from tests.desktop.test_chat_session import stats


def lines(document: QTextDocument) -> list[str]:
    found = []
    block = document.begin()
    while block.isValid():
        found.append(block.text())
        block = block.next()
    return found


def test_stopped_stands_on_its_own_line_without_a_cut_character(qapp: QApplication) -> None:
    session = ChatSession()
    session.send(ChatMessage(role="user", content="Count"))
    session.start_reply("tiny")
    session.apply(ReplyDelta(text="one two caf", tokens=3))
    session.apply(ReplyDelta(text="\ufffd", tokens=1))  # half of "é" when the stop came
    session.apply(ReplyDone(stats("cancelled", 4), "one two caf\ufffd", "", ()))
    session.finish()
    reply = session.messages[-1]
    assert reply["content"] == "one two caf" and reply.get("stopped") is True

    document = QTextDocument()
    render_transcript(document, session.messages, actions=False)
    text = lines(document)
    assert "one two caf" in text and "(stopped)" in text  # two lines, not "caf(stopped)"
    assert "\ufffd" not in document.toPlainText()


def test_an_empty_thinking_shows_no_thought_box(qapp: QApplication) -> None:
    session = ChatSession()
    session.send(ChatMessage(role="user", content="Hi"))
    session.start_reply("tiny")
    session.apply(ReplyDelta(thinking="\n\n", tokens=1))
    session.apply(ReplyDone(stats("stop", 1), "", "\n\n", ()))
    session.finish()
    assert "thinking" not in session.messages[-1]

    saved = ChatMessage(role="assistant", content="", model="tiny", thinking="\n")
    document = QTextDocument()
    render_transcript(document, [ChatMessage(role="user", content="Hi"), saved], actions=False)
    assert "Thought" not in document.toPlainText()
    assert boxes_in(document) == []  # no box


def test_the_edit_notice_says_what_sending_does_with_plurals() -> None:
    assert editing_notice(EditStarted(0, "x", (), later=0)).endswith(
        "Sending it replaces the message."
    )
    one = editing_notice(EditStarted(0, "x", (), later=1))
    assert "the message and the message after it stays here, greyed out" in one
    assert "replaces" not in one
    three = editing_notice(EditStarted(0, "x", (), later=3))
    assert "the 3 messages after it stay here" in three

    session = ChatSession()
    session.messages.extend(
        [ChatMessage(role="user", content="a"), ChatMessage(role="error", content="refused")]
    )
    started = session.begin_edit(0)
    assert started is not None and started.later == 0  # errors go with it: it is replaced


def test_the_message_menu_has_no_copy_link_location(qtbot: QtBot) -> None:
    host = QWidget()
    qtbot.addWidget(host)
    session = ChatSession()
    session.messages.extend(
        [
            ChatMessage(role="user", content="Hi"),
            ChatMessage(role="assistant", content="Hello", model="tiny"),
        ]
    )
    transcript = TranscriptView(host)
    actions = MessageActions(session, transcript, host)
    transcript.resize(400, 300)
    host.show()
    transcript.show_conversation(session.messages, None, fallback_model="tiny")
    found = transcript.document().find("Regenerate")
    assert not found.isNull()
    cursor = QTextCursor(found)
    cursor.setPosition(found.selectionStart() + 2)
    point = transcript.cursorRect(cursor).center()
    assert transcript.anchorAt(point).startswith("action:")  # over a link
    actions._context_menu(point)
    menu = actions.last_menu
    assert menu is not None
    texts = [a.text() for a in menu.actions()]
    assert "Regenerate this message" in texts
    assert not [t for t in texts if "Link" in t]
    menu.close()


def test_too_long_alone_offers_no_drop_and_a_long_chat_does(
    qtbot: QtBot, desktop: DesktopApp
) -> None:
    window = desktop.chat
    window.show()
    window.conversation.settings.context_limit = 48
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        window.send("Hello")
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        window.send(" ".join(["word"] * 120))  # over 48 tokens by itself
    assert window.conversation.messages[-1]["role"] == "error"
    reply = window.session.reply
    assert reply is not None and reply.refusal is not None
    assert reply.refusal.code == MESSAGE_TOO_LONG
    assert window.notice.isVisible() and "longer than the model's context" in window.notice.text
    assert "Drop oldest turns" not in window.notice.buttons
    window.apply(RemoveFailed())

    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        window.send("Hi")  # fits alone, not after the first turn
    assert "Drop oldest turns" in window.notice.buttons


def test_the_crash_notice_goes_once_the_engine_is_back(
    qtbot: QtBot, make_desktop: Callable[..., DesktopApp]
) -> None:
    desktop = make_desktop(chat_options=LONG_REPLY)
    window = desktop.chat
    window.show()
    with qtbot.waitSignal(window.reply_finished, timeout=60000):
        window.send("Count to twenty")
        qtbot.waitUntil(lambda: window.chunks_received >= 3, timeout=10000)
        pid = desktop.controller.engine.status().worker_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
    assert window.notice.isVisible() and "cut off" in window.notice.text
    qtbot.waitUntil(lambda: desktop.controller.status.state == READY, timeout=120000)
    qtbot.waitUntil(lambda: not window.notice.isVisible(), timeout=10000)
    text = window.transcript.toPlainText()
    assert "(interrupted: the engine stopped part way)" in text  # the reply says it still


def test_a_restart_reopens_the_last_chat(qtbot: QtBot, desktop: DesktopApp) -> None:
    older = Conversation(messages=[ChatMessage(role="user", content="Older chat")])
    last = Conversation(messages=[ChatMessage(role="user", content="The last chat")])
    desktop.history.save(older)
    desktop.history.save(last)
    window = ChatWindow(desktop.controller, desktop.tasks, desktop.history)
    qtbot.addWidget(window)
    assert window.conversation.id == last.id
    assert "The last chat" in window.transcript.toPlainText()
    assert window.windowTitle() == "The last chat — Sidelight"
