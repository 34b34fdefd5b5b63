"""A chat a person lives in: a refused message never locks the chat, what they typed stays as
typed, each reply keeps its model, and chats can be renamed and deleted."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLineEdit, QMessageBox
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.history import ChatMessage
from desktop.views.transcript import DROPPED_NOTE
from engine.models import DEMO_MODEL_ID
from engine.store.gguf_import import import_gguf
from tests.conftest import TINY_GGUF, dialogue

TOO_LONG = "word " * 3000  # the tiny model's context is 2048 tokens


def blocks(window: Any) -> list[str]:
    """The transcript's lines of text: not the empty lines round the cards, nor the rows of
    action pills (each label stands between en spaces)."""
    document = window.transcript.document()
    found = [document.findBlockByNumber(i).text() for i in range(document.blockCount())]
    return [line for line in found if line and not line.startswith("\u2002")]


def test_a_too_long_message_does_not_lock_the_chat(
    qtbot: QtBot, desktop: DesktopApp, dialogues: dict[str, Any]
) -> None:
    window = desktop.chat
    with qtbot.waitSignal(window.reply_finished, timeout=30000) as finished:
        window.send(TOO_LONG)
    assert finished.args[0] is None
    failed, error = window.conversation.messages
    assert failed["role"] == "user" and failed.get("failed") is True
    assert error["role"] == "error" and "context" in error["content"]
    assert "You  (not sent)" in blocks(window)
    assert "Error: " in window.transcript.toPlainText()
    assert window.conversation.engine_messages() == []  # neither reaches the model
    assert "longer than the model's context" in window.notice.text
    assert set(window.notice.buttons) == {"Edit message", "Remove"}

    # A later short message works, and its answer is the one to "Hello" alone.
    with qtbot.waitSignal(window.reply_finished, timeout=30000) as finished:
        window.send("Hello")
    assert finished.args[0] is not None and finished.args[0].finish_reason == "stop"
    assert window.last_reply == dialogue(dialogues, "hello")["reply"]
    assert window.notice.text == ""

    # A refused message can be taken back into the message box, and the chat on disk follows.
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        window.send(TOO_LONG + "again")
    qtbot.mouseClick(window.notice.buttons["Edit message"], Qt.MouseButton.LeftButton)
    assert window.input.toPlainText() == (TOO_LONG + "again").strip()
    roles = ["user", "error", "user", "assistant"]  # the first refusal stays on record
    assert [m["role"] for m in window.conversation.messages] == roles
    saved = desktop.history.get(window.conversation.id)
    assert saved is not None and [m["role"] for m in saved.messages] == roles


def test_remove_drops_the_refused_message(qtbot: QtBot, desktop: DesktopApp) -> None:
    window = desktop.chat
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        window.send(TOO_LONG)
    qtbot.mouseClick(window.notice.buttons["Remove"], Qt.MouseButton.LeftButton)
    assert window.conversation.messages == []
    assert window.notice.text == ""
    assert desktop.history.list() == []  # nothing left worth keeping


def test_drop_oldest_turns_when_the_chat_outgrows_the_context(
    qtbot: QtBot, desktop: DesktopApp, dialogues: dict[str, Any]
) -> None:
    window = desktop.chat
    hello = dialogue(dialogues, "multiturn")["messages"]
    window.conversation.messages = [
        ChatMessage(role="user", content="word " * 900),
        ChatMessage(role="assistant", content="word " * 900, model=DEMO_MODEL_ID),
        ChatMessage(role="user", content="word " * 400),
        ChatMessage(role="assistant", content="word " * 400, model=DEMO_MODEL_ID),
        ChatMessage(role="user", content=hello[0]["content"]),
        ChatMessage(role="assistant", content=hello[1]["content"], model=DEMO_MODEL_ID),
    ]
    with qtbot.waitSignal(window.reply_finished, timeout=30000) as finished:
        window.send(hello[2]["content"])  # short, but the chat is now too long
    assert finished.args[0] is None
    assert "no longer fits" in window.notice.text
    # The notice took room from the transcript; the refused message is still in view.
    bar = window.transcript.verticalScrollBar()
    qtbot.waitUntil(lambda: 0 < bar.maximum() == bar.value())
    assert {"Drop oldest turns", "New chat"} <= set(window.notice.buttons)

    with qtbot.waitSignal(window.reply_finished, timeout=60000) as finished:
        qtbot.mouseClick(window.notice.buttons["Drop oldest turns"], Qt.MouseButton.LeftButton)
    assert finished.args[0] is not None and finished.args[0].finish_reason == "stop"
    # Both long turns had to go (the first alone was not enough); the model saw the rest.
    assert window.last_reply == dialogue(dialogues, "multiturn")["reply"]
    messages = window.conversation.messages
    assert [bool(m.get("dropped")) for m in messages] == [True] * 4 + [False] * 4
    assert not any(m.get("failed") or m["role"] == "error" for m in messages)
    assert window.conversation.engine_messages() == [
        *hello,
        {"role": "assistant", "content": window.last_reply},
    ]
    # The dropped part stays visible, marked as such.
    assert DROPPED_NOTE in blocks(window)
    assert blocks(window).count("You") == 4


def test_new_chat_from_the_notice_carries_the_message_over(
    qtbot: QtBot, desktop: DesktopApp
) -> None:
    window = desktop.chat
    window.conversation.messages = [
        ChatMessage(role="user", content="word " * 1200),
        ChatMessage(role="assistant", content="word " * 1200, model=DEMO_MODEL_ID),
    ]
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        window.send("Hello")
    old_id = window.conversation.id
    qtbot.mouseClick(window.notice.buttons["New chat"], Qt.MouseButton.LeftButton)
    assert window.conversation.id != old_id and window.conversation.messages == []
    assert window.input.toPlainText() == "Hello"
    kept = desktop.history.get(old_id)
    assert kept is not None and len(kept.messages) == 2  # without the refused message


def test_what_the_person_typed_stays_plain_with_its_line_breaks(
    qtbot: QtBot, desktop: DesktopApp
) -> None:
    window = desktop.chat
    window.show()
    qtbot.keyClicks(window.input, "line one")
    qtbot.keyClick(window.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(window.input, "# not a heading, **not bold**")
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        qtbot.keyClick(window.input, Qt.Key.Key_Return)
    assert window.conversation.messages[0]["content"] == ("line one\n# not a heading, **not bold**")
    lines = blocks(window)
    assert lines[:3] == ["You", "line one", "# not a heading, **not bold**"]


def test_each_reply_keeps_the_name_of_the_model_that_wrote_it(
    qtbot: QtBot, desktop: DesktopApp
) -> None:
    controller, window = desktop.controller, desktop.chat
    stored = import_gguf(controller.store, TINY_GGUF)
    controller.refresh_models()
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        window.send("Hello")
    # The chat's own model (issue 28, defect 10): it answers; the default model stays.
    window.model_picker.activated.emit(window.model_picker.findData(stored.id))
    with qtbot.waitSignal(window.reply_finished, timeout=60000):
        window.send("Hi")
    assert controller.active_model_id == DEMO_MODEL_ID

    replies = [m for m in window.conversation.messages if m["role"] == "assistant"]
    assert [r.get("model") for r in replies] == [DEMO_MODEL_ID, stored.id]
    # Each header names its model as the picker does (issue 28, defect 12: the picker said
    # "Demo model (tiny, offline)" while the reply said "sidelight-demo").
    names = [
        window.model_picker.itemText(window.model_picker.findData(m))
        for m in (DEMO_MODEL_ID, stored.id)
    ]
    headers = [line for line in blocks(window) if line in names]
    assert headers == names
    reopened = desktop.history.get(window.conversation.id)
    assert reopened is not None
    assert [m.get("model") for m in reopened.messages if m["role"] == "assistant"] == [
        DEMO_MODEL_ID,
        stored.id,
    ]


def test_new_chat_resets_the_figures_and_the_title_names_the_chat(
    qtbot: QtBot, desktop: DesktopApp
) -> None:
    window = desktop.chat
    assert window.windowTitle() == "New chat — Sidelight"
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        window.send("Hello")
    strip = window.status_strip
    assert strip.rate_label.text().endswith(" tokens/s") and strip.rate_label.text()[0] != "—"
    assert strip.ttft_label.text().endswith(" ms")
    assert window.windowTitle() == "Hello — Sidelight"

    qtbot.mouseClick(window.new_button, Qt.MouseButton.LeftButton)
    assert strip.rate_label.text() == "— tokens/s"
    assert strip.ttft_label.text() == "TTFT —"
    assert window.windowTitle() == "New chat — Sidelight"


def test_chats_can_be_renamed_and_deleted_from_the_list(qtbot: QtBot, desktop: DesktopApp) -> None:
    window = desktop.chat
    window.show()
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        window.send("Hello")
    chat_id = window.conversation.id
    qtbot.mouseClick(window.chats_button, Qt.MouseButton.LeftButton)
    chats = window.chat_list
    assert chats.titles() == ["Hello"]

    # Rename in place: select, F2, type, Enter.
    chats.list.setCurrentRow(0)
    chats.list.setFocus()
    qtbot.keyClick(chats.list, Qt.Key.Key_F2)
    editor = chats.list.findChild(QLineEdit)  # the in-place editor F2 opened
    assert isinstance(editor, QLineEdit) and editor.isVisible()
    editor.selectAll()
    qtbot.keyClicks(editor, "Greetings")
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: chats.titles() == ["Greetings"])  # the list commits queued
    assert window.windowTitle() == "Greetings — Sidelight"
    saved = desktop.history.get(chat_id)
    assert saved is not None and saved.name == "Greetings"
    # The next reply keeps the name.
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        window.send("Hi")
    assert chats.titles() == ["Greetings"]

    # Delete asks first; Cancel keeps the chat.
    chats.list.setCurrentRow(0)
    qtbot.mouseClick(chats.delete_button, Qt.MouseButton.LeftButton)
    box = chats.confirmation
    assert box is not None and box.isVisible() and "Greetings" in box.text()
    box.button(QMessageBox.StandardButton.Cancel).click()
    assert desktop.history.get(chat_id) is not None

    chats.list.setCurrentRow(0)
    chats.list.setFocus()
    qtbot.keyClick(chats.list, Qt.Key.Key_Delete)
    box = chats.confirmation
    assert box is not None
    delete = next(b for b in box.buttons() if b.text() == "Delete")
    qtbot.mouseClick(delete, Qt.MouseButton.LeftButton)
    assert desktop.history.get(chat_id) is None
    assert chats.titles() == []
    # The open chat was the deleted one: the window moved to a new chat.
    assert window.conversation.id != chat_id and window.conversation.messages == []
    assert window.windowTitle() == "New chat — Sidelight"
