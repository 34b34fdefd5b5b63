"""What people expect of a chat in 2026, driven as a person would on the real engine (the
demo model): per-message copy, regenerate, edit-and-resend and delete by mouse and keyboard;
each reply's figures beneath it, kept in the history; per-chat generation settings; text
files and pasted code as attachments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QPoint, Qt, QTimer
from PySide6.QtGui import QGuiApplication, QTextCursor
from PySide6.QtWidgets import QApplication, QFileDialog
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.history import ChatSettings
from desktop.views.chat_settings import PRESETS, ChatSettingsDialog
from desktop.views.chat_window import ChatWindow
from desktop.views.transcript import DROPPED_NOTE, cut_marker
from engine.models import DEMO_MODEL_ID
from tests.conftest import dialogue
from tests.desktop.test_windows import ready_chat

CTRL = Qt.KeyboardModifier.ControlModifier
CTRL_SHIFT = CTRL | Qt.KeyboardModifier.ShiftModifier


def active_chat(qtbot: QtBot, desktop: DesktopApp) -> ChatWindow:
    """The chat as the active window, ready for window shortcuts."""
    window = ready_chat(qtbot, desktop)
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window)
    return window


def type_and_send(qtbot: QtBot, window: ChatWindow, text: str) -> None:
    qtbot.keyClicks(window.input, text)
    qtbot.keyClick(window.input, Qt.Key.Key_Return)


def click_link(qtbot: QtBot, window: ChatWindow, href: str) -> None:
    """Click the transcript link ``href`` where it is drawn, as a mouse would."""
    view = window.transcript
    document = view.document()
    cursor = QTextCursor(document)
    for position in range(document.characterCount() - 1):
        cursor.setPosition(position + 1)
        if cursor.charFormat().anchorHref() == href:
            break
    else:
        raise AssertionError(f"no link {href} in the transcript")
    view.setTextCursor(cursor)
    view.ensureCursorVisible()
    rect = view.cursorRect(cursor)
    point = QPoint(rect.left() + 4, rect.center().y())  # on the link's first letter
    assert view.anchorAt(point) == href, (view.anchorAt(point), point, rect)
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=point)


def test_copy_regenerate_edit_and_delete_by_mouse_and_keyboard(
    qtbot: QtBot, desktop: DesktopApp, dialogues: dict[str, Any]
) -> None:
    window = active_chat(qtbot, desktop)
    hello = dialogue(dialogues, "hello")["reply"]
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        type_and_send(qtbot, window, "Hello")
    messages = window.conversation.messages

    # Copy the reply from the link under it.
    QGuiApplication.clipboard().clear()
    click_link(qtbot, window, "action:copy/1")
    assert QGuiApplication.clipboard().text() == hello

    # Ctrl+R answers again: the reply is replaced, not added.
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        qtbot.keyClick(window.input, Qt.Key.Key_R, CTRL)
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert window.last_reply == hello

    # A second turn, then edit the first message from its link: it comes back into the box.
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        type_and_send(qtbot, window, "Tell me more")
    click_link(qtbot, window, "action:edit/0")
    assert window.input.toPlainText() == "Hello"
    assert "Editing a message" in window.notice.text
    assert "3 messages after it" in window.notice.text
    window.input.clear()
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        type_and_send(qtbot, window, "Hello")
    # The chat continues from the edited message; the later turns are greyed, not sent.
    assert [m.get("dropped", False) for m in messages] == [True] * 4 + [False] * 2
    assert DROPPED_NOTE in window.transcript.toPlainText()
    sent = window.conversation.engine_messages()
    assert sent == [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": hello}]

    # Regenerating an earlier reply asks its question again at the end.
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        click_link(qtbot, window, "action:regenerate/3")
    assert [m["content"] for m in messages[-2:]] == ["Tell me more", messages[-1]["content"]]
    assert len(window.conversation.engine_messages()) == 2
    assert window.conversation.engine_messages()[0]["content"] == "Tell me more"

    # Ctrl+E takes the last message typed back into the box; Cancel edit leaves all as was.
    before = [dict(m) for m in messages]
    qtbot.keyClick(window.input, Qt.Key.Key_E, CTRL)
    assert window.input.toPlainText() == "Tell me more"
    qtbot.mouseClick(window.notice.buttons["Cancel edit"], Qt.MouseButton.LeftButton)
    assert window.input.toPlainText() == "" and messages == before

    # Delete from the link: gone from the chat and from the file on disk.
    click_link(qtbot, window, f"action:delete/{len(messages) - 1}")
    assert len(messages) == len(before) - 1
    saved = desktop.history.get(window.conversation.id)
    assert saved is not None and len(saved.messages) == len(messages)


def test_the_context_menu_offers_the_message_actions(qtbot: QtBot, desktop: DesktopApp) -> None:
    window = active_chat(qtbot, desktop)
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        type_and_send(qtbot, window, "Hello")
    view = window.transcript
    view.setFocus()
    view.moveCursor(QTextCursor.MoveOperation.Start)  # on the user's message

    # The Menu key opens the menu for the message the cursor is on.
    qtbot.keyClick(view, Qt.Key.Key_Menu)
    qtbot.waitUntil(lambda: getattr(window.message_actions, "last_menu", None) is not None)
    menu = window.message_actions.last_menu
    texts = [a.text() for a in menu.actions()]
    assert "Edit this message" in texts and "Regenerate this message" not in texts
    edit = next(a for a in menu.actions() if a.text() == "Edit this message")
    edit.trigger()
    menu.close()
    assert window.input.toPlainText() == "Hello"
    window.message_actions.cancel_edit()

    # Tab walks the transcript's links; Enter runs the one in focus (here: copy "Hello").
    view.setFocus()
    view.moveCursor(QTextCursor.MoveOperation.Start)
    QGuiApplication.clipboard().clear()
    qtbot.keyClick(view, Qt.Key.Key_Tab)
    assert view.textCursor().charFormat().anchorHref() == "action:copy/0"
    qtbot.keyClick(view, Qt.Key.Key_Return)
    assert QGuiApplication.clipboard().text() == "Hello"


def test_each_reply_shows_its_figures_kept_after_reopening(
    qtbot: QtBot, desktop: DesktopApp
) -> None:
    window = active_chat(qtbot, desktop)
    with qtbot.waitSignal(window.reply_finished, timeout=30000) as finished:
        type_and_send(qtbot, window, "Hello")
    stats = finished.args[0]
    figures = window.conversation.messages[1].get("figures")
    assert figures is not None
    assert figures["tokens"] == stats.completion_tokens > 0
    assert figures["tokens_per_second"] == stats.tokens_per_second
    assert figures["ttft_seconds"] == stats.ttft_seconds
    line = (
        f"{DEMO_MODEL_ID} · {stats.tokens_per_second:.1f} tokens/s · "
        f"TTFT {stats.ttft_seconds * 1000:.0f} ms · {stats.completion_tokens} tokens"
    )
    assert line in window.transcript.toPlainText()

    # Another chat, then back: the line is read from the history and stays the same even
    # though the chat's model is then named otherwise.
    conversation_id = window.conversation.id
    qtbot.keyClick(window.input, Qt.Key.Key_N, CTRL)
    assert line not in window.transcript.toPlainText()
    window.open_conversation(conversation_id)
    window.conversation.model = "another-model"
    window._render()
    assert line in window.transcript.toPlainText()


def _in_dialog(qtbot: QtBot, act: Any) -> None:
    """Run ``act(dialog)`` on the chat settings dialog once it is open, then press Enter."""

    def drive() -> None:
        dialog = QApplication.activeModalWidget()
        if not isinstance(dialog, ChatSettingsDialog):
            QTimer.singleShot(20, drive)
            return
        act(dialog)
        qtbot.keyClick(dialog, Qt.Key.Key_Return)

    QTimer.singleShot(0, drive)


def test_chat_settings_are_kept_with_the_chat_and_applied(
    qtbot: QtBot, desktop: DesktopApp
) -> None:
    window = active_chat(qtbot, desktop)

    def choose(dialog: ChatSettingsDialog) -> None:
        dialog.max_tokens.setFocus()
        dialog.max_tokens.selectAll()
        qtbot.keyClicks(dialog.max_tokens, "5")
        dialog.temperature.setFocus()
        dialog.temperature.selectAll()
        qtbot.keyClicks(dialog.temperature, "0.0")
        dialog.preset.setFocus()
        index = dialog.preset.findText("Concise")
        dialog.preset.setCurrentIndex(index)
        dialog.preset.activated.emit(index)

    _in_dialog(qtbot, choose)
    qtbot.keyClick(window.input, Qt.Key.Key_Comma, CTRL)
    chosen = window.conversation.settings
    assert (chosen.max_tokens, chosen.temperature) == (5, 0.0)
    assert window.conversation.system_prompt == PRESETS["Concise"]
    assert window.system_chip.isVisible()

    with qtbot.waitSignal(window.reply_finished, timeout=30000) as finished:
        type_and_send(qtbot, window, "Hello")
    assert finished.args[0].completion_tokens == 5
    assert finished.args[0].finish_reason == "length"
    saved = desktop.history.get(window.conversation.id)
    assert saved is not None and saved.settings == chosen
    assert saved.system_prompt == PRESETS["Concise"]

    # A context limit the chat outgrows: the choice to drop the oldest turns or start anew.
    # The message and the system prompt alone take 92 tokens: they fit in 100, the chat
    # does not (a message over the limit by itself offers no drop: test_chat_details.py).
    def limit(dialog: ChatSettingsDialog) -> None:
        dialog.context_limit.setFocus()
        dialog.context_limit.selectAll()
        qtbot.keyClicks(dialog.context_limit, "100")

    _in_dialog(qtbot, limit)
    qtbot.mouseClick(window.settings_button, Qt.MouseButton.LeftButton)
    assert window.conversation.settings.context_limit == 100
    with qtbot.waitSignal(window.reply_finished, timeout=30000) as finished:
        type_and_send(qtbot, window, "Tell me a long story about " + "a very long river " * 3)
    assert finished.args[0] is None
    assert "no longer fits" in window.notice.text
    assert {"Drop oldest turns", "New chat"} <= set(window.notice.buttons)
    with qtbot.waitSignal(window.reply_finished, timeout=30000) as finished:
        qtbot.mouseClick(window.notice.buttons["Drop oldest turns"], Qt.MouseButton.LeftButton)
    assert finished.args[0] is not None  # answered once the oldest turn was dropped
    assert window.conversation.messages[0].get("dropped") is True
    assert DROPPED_NOTE in window.transcript.toPlainText()


def test_attach_a_text_file_and_pasted_code(
    qtbot: QtBot, desktop: DesktopApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file dialog is the one stand-in (a native dialog cannot be driven offscreen)."""
    window = active_chat(qtbot, desktop)
    notes = tmp_path / "notes.txt"
    notes.write_text("The river is long.\nIt runs to the sea.\n", encoding="utf-8")
    picked = [str(notes)]
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (picked[0], ""))

    qtbot.keyClick(window.input, Qt.Key.Key_O, CTRL)
    attached = window.pending_attachments
    qtbot.waitUntil(lambda: attached.counting == 0 and attached.items[0]["tokens"] > 0)
    chip = attached.items[0]
    assert (chip["name"], chip["size"]) == ("notes.txt", 39)

    QGuiApplication.clipboard().setText("def add(a, b):\n    return a + b\n")
    qtbot.keyClick(window.input, Qt.Key.Key_V, CTRL_SHIFT)
    qtbot.waitUntil(lambda: attached.counting == 0 and len(attached.items) == 2)
    assert attached.items[1]["name"] == "pasted-2.txt"

    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        type_and_send(qtbot, window, "Summarize")
    message = window.conversation.messages[0]
    assert [a["name"] for a in message.get("attachments", [])] == ["notes.txt", "pasted-2.txt"]
    sent = window.conversation.engine_messages()[0]["content"]
    assert sent.startswith("Summarize\n\nAttached file notes.txt:\n```\nThe river is long.")
    assert "def add(a, b):" in sent
    text = window.transcript.toPlainText()
    assert f"notes.txt · 39 B · {chip['tokens']} tokens" in text
    assert not attached.isVisible()

    # A binary file and a too big one are refused with a clear message.
    binary = tmp_path / "image.png"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0")
    picked[0] = str(binary)
    qtbot.keyClick(window.input, Qt.Key.Key_O, CTRL)
    assert "not a text file" in window.notice.text and attached.items == []
    big = tmp_path / "big.log"
    big.write_text("x" * 300_000, encoding="utf-8")
    picked[0] = str(big)
    qtbot.keyClick(window.input, Qt.Key.Key_O, CTRL)
    assert "files up to 256.0 KB" in window.notice.text and attached.items == []


def test_settings_are_per_chat_and_a_cut_reply_is_marked(qtbot: QtBot, desktop: DesktopApp) -> None:
    """Issue 28: a new chat started with the last chat's max tokens, temperature and system
    prompt, and a reply cut by max tokens looked finished."""
    window = active_chat(qtbot, desktop)

    def choose(dialog: ChatSettingsDialog) -> None:
        dialog.max_tokens.setFocus()
        dialog.max_tokens.selectAll()
        qtbot.keyClicks(dialog.max_tokens, "5")
        dialog.temperature.setFocus()
        dialog.temperature.selectAll()
        qtbot.keyClicks(dialog.temperature, "0.0")
        index = dialog.preset.findText("Concise")
        dialog.preset.setCurrentIndex(index)
        dialog.preset.activated.emit(index)

    _in_dialog(qtbot, choose)
    qtbot.keyClick(window.input, Qt.Key.Key_Comma, CTRL)
    first = window.conversation
    chosen = first.settings
    assert (chosen.max_tokens, chosen.temperature) == (5, 0.0)
    with qtbot.waitSignal(window.reply_finished, timeout=30000) as finished:
        type_and_send(qtbot, window, "Hello")
    assert finished.args[0].finish_reason == "length"
    assert window.conversation.messages[-1].get("cut_at") == 5
    assert cut_marker(5) in window.transcript.toPlainText()
    assert "cut at" not in (window.last_reply or "")  # a marker, never the reply's text

    window.activateWindow()  # the offscreen platform leaves the closed dialog active
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window)
    qtbot.keyClick(window.input, Qt.Key.Key_N, CTRL)
    assert window.conversation is not first
    assert window.conversation.settings == ChatSettings()
    assert window.conversation.system_prompt == "" and not window.system_chip.isVisible()
    with qtbot.waitSignal(window.reply_finished, timeout=30000) as finished:
        type_and_send(qtbot, window, "Hello")
    assert finished.args[0].finish_reason == "stop"
    assert finished.args[0].completion_tokens > 5
    assert "cut at" not in window.transcript.toPlainText()

    window.open_conversation(first.id)  # the older chat comes back with its own settings
    assert window.conversation.settings == chosen
    assert window.conversation.system_prompt == PRESETS["Concise"]
    assert window.system_chip.isVisible()
    assert cut_marker(5) in window.transcript.toPlainText()  # kept in the history
