"""Windows a person can reach and use: on a small laptop screen, without a tray, and from
the keyboard."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication, QSystemTrayIcon, QWidget
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.views.chat_window import ChatWindow
from tests.desktop.conftest import LONG_REPLY


def on_screen(window: QWidget) -> QRect:
    area = window.screen().availableGeometry()
    assert area.height() < 640, "the tests run on the small laptop screen (conftest)"
    return area


def inside(window: QWidget, child: QWidget) -> bool:
    top_left = child.mapTo(window, QPoint(0, 0))
    return window.rect().contains(QRect(top_left, child.size()))


def test_every_window_fits_a_1366x768_laptop_at_125_percent(
    qtbot: QtBot, desktop: DesktopApp
) -> None:
    desktop.show_chat()
    chat = desktop.chat
    area = on_screen(chat)
    assert area.contains(chat.frameGeometry()), (chat.frameGeometry(), area)
    for part in (chat.send_button, chat.input, chat.status_strip):
        assert part.isVisible() and inside(chat, part)

    desktop.show_models()
    desktop.show_settings()
    qtbot.waitUntil(lambda: desktop._welcome_dialog is not None, timeout=15000)
    for window in (desktop._models, desktop._settings, desktop._welcome_dialog):
        assert window is not None and window.isVisible()
        assert area.contains(window.frameGeometry()), (window, window.frameGeometry(), area)


def test_without_a_tray_the_chat_opens_and_says_why(desktop: DesktopApp) -> None:
    assert not QSystemTrayIcon.isSystemTrayAvailable()  # offscreen: like GNOME without it
    assert not desktop.tray.isVisible()
    chat = desktop.chat
    assert chat.isVisible()
    assert "no tray icons" in chat.notice.text and "closing it quits" in chat.notice.text
    assert "\n" not in chat.notice.text and not chat.notice.buttons  # one line, nothing to do
    assert not chat.escape_hides  # nothing could bring a hidden window back


def ready_chat(qtbot: QtBot, desktop: DesktopApp) -> ChatWindow:
    """The chat as the active window (the first-run welcome closed)."""
    qtbot.waitUntil(lambda: desktop._welcome_dialog is not None, timeout=15000)
    assert desktop._welcome_dialog is not None
    desktop._welcome_dialog.reject()
    window = desktop.chat
    window.show_and_raise()
    qtbot.waitActive(window)
    return window


def test_keyboard_shortcuts_and_their_tooltips(
    qtbot: QtBot, make_desktop: Callable[..., DesktopApp]
) -> None:
    desktop = make_desktop()
    window = ready_chat(qtbot, desktop)
    assert "Ctrl+N" in window.new_button.toolTip()
    assert "Ctrl+Shift+C" in window.copy_button.toolTip()
    assert "Ctrl+L" in window.input.toolTip()
    assert "Enter" in window.send_button.toolTip()

    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        window.send("Hello")
    qtbot.keyClick(
        window.input,
        Qt.Key.Key_C,
        Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier,
    )
    assert QApplication.clipboard().text() == window.last_reply

    window.model_picker.setFocus()
    qtbot.keyClick(window.model_picker, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier)
    assert window.input.hasFocus()

    qtbot.keyClick(window.input, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert window.conversation.messages == []

    # Esc with no reply running: out of the way (minimized here, as there is no tray).
    qtbot.keyClick(window.input, Qt.Key.Key_Escape)
    qtbot.waitUntil(window.isMinimized)
    window.show_and_raise()
    window.escape_hides = True  # with a tray icon to bring it back, Esc hides it
    qtbot.keyClick(window.input, Qt.Key.Key_Escape)
    assert not window.isVisible()


def test_esc_and_ctrl_period_stop_a_running_reply(
    qtbot: QtBot, make_desktop: Callable[..., DesktopApp]
) -> None:
    desktop = make_desktop(chat_options=LONG_REPLY)
    window = ready_chat(qtbot, desktop)
    for key, modifier in (
        (Qt.Key.Key_Escape, Qt.KeyboardModifier.NoModifier),
        (Qt.Key.Key_Period, Qt.KeyboardModifier.ControlModifier),
    ):
        with qtbot.waitSignal(window.reply_finished, timeout=30000) as finished:
            window.send("Count to twenty")
            qtbot.waitUntil(lambda: window.chunks_received >= 3, timeout=10000)
            tip = window.send_button.toolTip()
            assert "Esc" in tip and "Ctrl+." in tip
            qtbot.keyClick(window.input, key, modifier)
        assert finished.args[0].finish_reason == "cancelled"
        assert window.isVisible()  # Esc stopped the reply; it did not hide the window


def _ink(button: QWidget, ratio: float) -> QImage:
    """``button`` painted at device pixel ratio ``ratio`` (1x, 1.25x, 2x screens)."""
    image = QImage(
        round(button.width() * ratio), round(button.height() * ratio), QImage.Format.Format_RGB32
    )
    image.setDevicePixelRatio(ratio)
    image.fill(0xFFFFFFFF)
    button.render(image)
    return image


def _changed_columns(a: QImage, b: QImage) -> set[int]:
    """The pixel columns where ``a`` and ``b`` differ."""
    return {
        x for x in range(a.width()) for y in range(a.height()) if a.pixel(x, y) != b.pixel(x, y)
    }


@pytest.mark.parametrize("ratio", [1.0, 1.25, 2.0])
def test_the_more_menu_arrow_never_overlaps_its_text(desktop: DesktopApp, ratio: float) -> None:
    """The chat's *More* button draws its menu arrow beside "More", not over the "e" (a
    tool button's arrow sat in its corner, touching or over the text: 1 px apart here).

    The text's pixels are what blanking the text removes; the arrow's are what removing the
    menu removes (both on the real button, at its real size, restored afterwards).
    """
    chat = desktop.chat
    chat.show_and_raise()
    button = chat.menu_button
    text, menu = button.text(), button.menu()
    assert text == "More" and menu is not None
    size = button.size()
    whole = _ink(button, ratio)
    button.setText("")
    button.resize(size)
    no_text = _ink(button, ratio)
    button.setMenu(None)  # type: ignore[arg-type]  # Qt accepts None: no menu
    button.resize(size)
    bare = _ink(button, ratio)
    button.setMenu(menu)
    button.setText(text)
    text_columns = _changed_columns(whole, no_text)
    arrow_columns = _changed_columns(no_text, bare)
    assert text_columns and arrow_columns, "the text and the arrow are both drawn"
    gap = (min(arrow_columns) - max(text_columns) - 1) / ratio  # blank logical pixels
    assert gap >= 3, f"only {gap:.1f} px between the text and the arrow at {ratio}x"
    assert button.sizeHint().width() <= button.width()  # the layout gives it all it asks
