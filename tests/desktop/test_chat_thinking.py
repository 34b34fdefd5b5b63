"""A reasoning model's thinking and a model's tool calls in the chat window, on the real
engine: the demo model answers its ``think`` dialogue with a ``<think>`` block and its
``tool`` dialogue with a ``<tool_call>`` block (tests/models/dialogues.json).

The thinking shows in its own box above the answer, closed once the answer is there and
opened by a click on its header; a tool call shows as a box with the function's name and its
arguments. Neither is ever raw tags, nor part of the reply a person copies.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextFrame
from PySide6.QtWidgets import QApplication, QTextBrowser
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.chat import ChatOptions
from desktop.views.chat_window import ChatWindow
from desktop.views.transcript import boxes_in
from engine.worker.messages import SamplingParams
from tests.conftest import dialogue

THOUGHT = re.compile(r"Thought for (under a second|\d+ s)")


def type_and_send(qtbot: QtBot, window: ChatWindow, text: str) -> None:
    qtbot.keyClicks(window.input, text)
    qtbot.keyClick(window.input, Qt.Key.Key_Return)


def click_text(qtbot: QtBot, view: QTextBrowser, text: str) -> None:
    """Click, as a person would, on ``text`` in the transcript (a link in it)."""
    found = view.document().find(text)
    assert not found.isNull(), f"{text!r} is not in the transcript"
    found.setPosition(found.selectionStart() + 2)
    view.setTextCursor(found)
    view.ensureCursorVisible()
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=view.cursorRect().center())


def boxes(view: QTextBrowser) -> list[str]:
    """The text of each shaded box (a frame inside a turn's card) in the transcript."""
    return [_frame_text(frame) for frame in boxes_in(view.document())]


def _frame_text(frame: QTextFrame) -> str:
    cursor = frame.firstCursorPosition()
    cursor.setPosition(frame.lastPosition(), cursor.MoveMode.KeepAnchor)
    return cursor.selectedText().replace("\u2029", "\n")


def test_thinking_shows_apart_closed_and_opens_on_a_click(
    qtbot: QtBot, desktop: DesktopApp, dialogues: dict[str, Any]
) -> None:
    think = dialogue(dialogues, "think")  # "<think>\n2 plus 2 is 4.\n</think>\n\nThe answer is 4."
    window = desktop.chat
    window.show()

    with qtbot.waitSignal(window.reply_finished, timeout=30000) as finished:
        type_and_send(qtbot, window, think["messages"][0]["content"])

    assert finished.args[0].finish_reason == "stop"
    view = window.transcript
    shown = view.toPlainText()
    assert "think>" not in shown and "The answer is 4." in shown
    # Closed once the answer is there: only its header, above the answer.
    header = THOUGHT.search(shown)
    assert header and "▸ " + header.group() in shown
    assert "2 plus 2 is 4." not in shown and boxes(view) == []
    assert shown.index(header.group()) < shown.index("The answer is 4.")

    click_text(qtbot, view, "Thought for")
    shown = view.toPlainText()
    assert boxes(view) == ["2 plus 2 is 4."]
    assert "▾ Thought for" in shown
    assert shown.index("Thought for") < shown.index("2 plus 2") < shown.index("The answer is 4.")
    click_text(qtbot, view, "Thought for")
    assert boxes(view) == [] and "2 plus 2 is 4." not in view.toPlainText()

    # Copy reply copies the answer alone.
    QApplication.clipboard().clear()
    qtbot.mouseClick(window.copy_button, Qt.MouseButton.LeftButton)
    assert QApplication.clipboard().text() == "The answer is 4."

    # The history keeps the thinking apart from the answer...
    chat_id = window.conversation.id
    saved = desktop.history.get(chat_id)
    assert saved is not None
    reply = saved.messages[-1]
    assert (reply["content"], reply.get("thinking")) == ("The answer is 4.", "2 plus 2 is 4.")
    assert reply.get("thinking_seconds", -1) >= 0
    # ...and the model gets it back only as reasoning_content (its template decides).
    assert saved.engine_messages()[-1] == {
        "role": "assistant",
        "content": "The answer is 4.",
        "reasoning_content": "2 plus 2 is 4.",
    }

    # Reopened, the chat shows the thinking closed again, and it still opens.
    window.new_chat()
    assert "The answer is 4." not in view.toPlainText()
    window.open_conversation(chat_id)
    assert THOUGHT.search(view.toPlainText()) and boxes(view) == []
    click_text(qtbot, view, "Thought for")
    assert boxes(view) == ["2 plus 2 is 4."]

    # The next turn goes through with the thinking in the history.
    with qtbot.waitSignal(window.reply_finished, timeout=30000) as finished:
        type_and_send(qtbot, window, "Hello")
    assert finished.args[0] is not None and finished.args[0].finish_reason == "stop"
    assert [m["role"] for m in window.conversation.messages] == ["user", "assistant"] * 2


def test_a_tool_call_shows_as_a_call(
    qtbot: QtBot, make_desktop: Callable[..., DesktopApp], dialogues: dict[str, Any]
) -> None:
    tool = dialogue(dialogues, "tool")
    options = ChatOptions(sampling=SamplingParams(temperature=0), tools=tuple(tool["tools"]))
    desktop = make_desktop(chat_options=options)
    window = desktop.chat
    window.show()
    calls: list[object] = []
    window.tool_calls_received.connect(calls.append)

    with qtbot.waitSignal(window.reply_finished, timeout=30000) as finished:
        type_and_send(qtbot, window, tool["messages"][0]["content"])

    assert finished.args[0].finish_reason == "tool_calls" and len(calls) == 1
    view = window.transcript
    block = 'Tool call  get_weather\n{\n  "city": "Paris"\n}'
    assert boxes(view) == [block]
    assert "tool_call" not in view.toPlainText()

    chat_id = window.conversation.id
    saved = desktop.history.get(chat_id)
    assert saved is not None
    reply = saved.messages[-1]
    assert reply["content"] == "" and "thinking" not in reply
    (call,) = reply.get("calls", [])
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Paris"}
    assert saved.engine_messages()[-1]["tool_calls"] == [
        {
            "id": call["id"],
            "type": "function",
            "function": {"name": "get_weather", "arguments": call["arguments"]},
        }
    ]

    window.new_chat()
    window.open_conversation(chat_id)
    assert boxes(view) == [block]
