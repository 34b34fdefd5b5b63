"""The system prompt spends no row of the chat: a chip above the message box names it by its
first words while the chat has one, opens the chat settings on it by mouse or keyboard, and
is gone while the chat has none (the More menu's entry adds one)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QLineEdit
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.views.chat_settings import ChatSettingsDialog
from tests.desktop.test_chat_actions import _in_dialog, active_chat

PROMPT = "Answer in French, briefly, and always give one short example sentence."


def test_the_system_prompt_is_a_chip_that_opens_the_chat_settings(
    qtbot: QtBot, desktop: DesktopApp
) -> None:
    window = active_chat(qtbot, desktop)
    window.new_chat()
    fields = [w.placeholderText() for w in window.findChildren(QLineEdit) if w.isVisible()]
    assert not any("system prompt" in text.lower() for text in fields)  # no row of its own
    assert not window.system_chip.isVisible()
    assert window.system_action.text() == "Add a system prompt…"
    assert window.system_action in window.menu_button.menu().actions()

    focused: list[bool] = []

    def write(dialog: ChatSettingsDialog) -> None:
        focused.append(dialog.focusWidget() is dialog.prompt)  # opened on it, ready to type
        qtbot.keyClicks(dialog.prompt, PROMPT)

    _in_dialog(qtbot, write)
    window.system_action.trigger()
    assert focused == [True]
    assert window.conversation.system_prompt == PROMPT
    assert window.system_chip.isVisible()
    assert window.system_chip.text() == "System: Answer in French, briefly, and always…"
    assert PROMPT in window.system_chip.toolTip()
    assert window.system_action.text() == "Edit the system prompt…"
    chip_bottom = window.system_chip.mapTo(window, window.system_chip.rect().bottomLeft())
    assert chip_bottom.y() <= window.input.mapTo(window, window.input.rect().topLeft()).y()

    # Keyboard: Shift+Tab from the message box reaches the chip; Space opens the settings.
    window.activateWindow()  # the offscreen platform leaves the closed dialog active
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window)
    window.input.setFocus()
    qtbot.keyClick(window.input, Qt.Key.Key_Backtab, Qt.KeyboardModifier.ShiftModifier)
    assert window.system_chip.hasFocus()

    def clear(dialog: ChatSettingsDialog) -> None:
        dialog.prompt.clear()

    _in_dialog(qtbot, clear)
    qtbot.keyClick(window.system_chip, Qt.Key.Key_Space)
    assert window.conversation.system_prompt == ""
    assert not window.system_chip.isVisible()
    assert window.system_action.text() == "Add a system prompt…"
