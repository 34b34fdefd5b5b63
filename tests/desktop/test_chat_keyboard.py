"""A keyboard-first chat (issue 28, defect 3): Tab leaves the message box, every focused
control shows a ring in both themes, Esc undoes the nearest thing first (an edit, then a
reply, then the window), and the Stop and Ctrl+L shortcuts are written where a person looks.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QImage
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QDoubleSpinBox,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QStyle,
    QStyleOptionSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)
from pytestqt.qtbot import QtBot

from desktop import theme
from desktop.app import DesktopApp
from desktop.chat_session import Edit
from desktop.theme import SCHEMES, ThemeManager
from tests.desktop.test_chat_actions import active_chat as ready_chat


@pytest.fixture(autouse=True)
def back_to_light() -> Iterator[None]:
    """The QApplication outlives a test: leave it light, as the other tests expect."""
    yield
    ThemeManager("light").apply()


def test_tab_leaves_the_message_box_and_shift_tab_comes_back(
    qtbot: QtBot, desktop: DesktopApp
) -> None:
    window = ready_chat(qtbot, desktop)
    qtbot.waitUntil(window.input.hasFocus)
    qtbot.keyClicks(window.input, "Hi")
    qtbot.keyClick(window.input, Qt.Key.Key_Tab)
    assert window.input.toPlainText() == "Hi"  # no tab character typed
    assert window.send_button.hasFocus()
    qtbot.keyClick(window.send_button, Qt.Key.Key_Backtab)
    assert window.input.hasFocus()

    # Tab goes round every control and back to the message box.
    seen: list[QWidget] = []
    for _ in range(30):
        focused = QApplication.focusWidget()
        assert focused is not None
        qtbot.keyClick(focused, Qt.Key.Key_Tab)
        now = QApplication.focusWidget()
        if now is window.input:
            break
        assert now is not None
        seen.append(now)
    assert QApplication.focusWidget() is window.input
    for control in (
        window.send_button,
        window.attach_button,
        window.copy_button,
        window.chats_button,
        window.model_picker,
        window.new_button,
        window.settings_button,
        window.menu_button,
    ):
        assert control in seen


def _ring_pixels(widget: QWidget, ring: str) -> int:
    image: QImage = widget.grab().toImage()
    return sum(
        1
        for x in range(image.width())
        for y in range(image.height())
        if QColor(image.pixel(x, y)).name() == ring
    )


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_the_focused_control_shows_a_ring_in_both_themes(qtbot: QtBot, scheme: str) -> None:
    ThemeManager(scheme).apply()  # type: ignore[arg-type]
    ring = theme.colour("focus_ring").name()
    host = QWidget()
    qtbot.addWidget(host)
    layout = QVBoxLayout(host)
    chats = QToolButton()
    chats.setText("Chats")
    chats.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
    picker = QComboBox()
    picker.addItem("Demo model")
    controls: list[QWidget] = [
        QPushButton("Send"),
        chats,
        picker,
        QLineEdit("x"),
        QPlainTextEdit(),
        QSpinBox(),
        QDoubleSpinBox(),
    ]
    for control in controls:
        layout.addWidget(control)
    host.show()
    qtbot.waitExposed(host)
    host.activateWindow()
    for control in controls:
        control.setFocus()
        qtbot.waitUntil(control.hasFocus)
        others = [c for c in controls if c is not control]
        perimeter = 2 * (control.width() + control.height())
        assert _ring_pixels(control, ring) >= 0.9 * perimeter  # a ring all round it
        assert all(_ring_pixels(other, ring) == 0 for other in others)


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_a_focused_spin_box_keeps_its_arrows(qtbot: QtBot, scheme: str) -> None:
    """Chat settings' *Temperature* with the focus drew its up and down buttons as two flat
    bars: the focus ring's style sheet rule made Qt's style-sheet engine draw them. The
    buttons must look the same with and without the focus (the ring aside)."""
    ThemeManager(scheme).apply()  # type: ignore[arg-type]
    host = QWidget()
    qtbot.addWidget(host)
    layout = QVBoxLayout(host)
    spin = QDoubleSpinBox()
    spin.setSpecialValueText("Model default")
    spin.setValue(0.7)
    other = QLineEdit()
    layout.addWidget(spin)
    layout.addWidget(other)
    host.resize(320, 90)
    host.show()
    qtbot.waitExposed(host)
    host.activateWindow()
    other.setFocus()
    qtbot.waitUntil(other.hasFocus)
    unfocused = spin.grab().toImage()
    spin.setFocus()
    qtbot.waitUntil(spin.hasFocus)
    focused = spin.grab().toImage()
    option = QStyleOptionSpinBox()
    spin.initStyleOption(option)
    style, spin_box = spin.style(), QStyle.ComplexControl.CC_SpinBox
    up = style.subControlRect(spin_box, option, QStyle.SubControl.SC_SpinBoxUp, spin)
    down = style.subControlRect(spin_box, option, QStyle.SubControl.SC_SpinBoxDown, spin)
    buttons = up.united(down).adjusted(0, 2, -2, -2)  # clear of the 2 px ring at the edge
    assert buttons.width() > 4 and buttons.height() > 4
    assert focused.copy(buttons) == unfocused.copy(buttons), "the arrows changed with the focus"


def test_esc_cancels_an_edit_before_it_hides_the_window(qtbot: QtBot, desktop: DesktopApp) -> None:
    window = ready_chat(qtbot, desktop)
    window.escape_hides = True
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        window.send("Hello")
    window.apply(Edit(0))
    assert window.session.editing == 0 and window.input.toPlainText() == "Hello"

    qtbot.keyClick(window.input, Qt.Key.Key_Escape)
    assert window.isVisible()  # the edit ended; the window stayed
    assert window.session.editing is None and window.input.toPlainText() == ""
    assert window.conversation.messages[0]["content"] == "Hello"  # kept as it was

    qtbot.keyClick(window.input, Qt.Key.Key_Escape)
    assert not window.isVisible()  # nothing left to undo: Esc hides it


def test_stop_and_the_message_box_shortcuts_are_shown(qtbot: QtBot, desktop: DesktopApp) -> None:
    window = ready_chat(qtbot, desktop)
    assert "Ctrl+." in window.send_button.toolTip()  # Send turns into Stop while a reply runs
    assert "Ctrl+L" in window.input.toolTip()
    menu = window.menu_button.menu()
    assert menu is not None
    shown = {a.text(): a.shortcut().toString() for a in menu.actions() if not a.isSeparator()}
    assert shown["Stop the reply"] == "Ctrl+."
    assert shown["Go to the message box"] == "Ctrl+L"
    assert not window.stop_action.isEnabled()  # nothing to stop yet
