"""Issue 28, "How it looks": the transcript read as a form, not a conversation.

Seen before: user and assistant turns differed only by a bold name between horizontal
rules; every message carried a line of plain text links; a new chat was an empty box with
no hint of what to do. Now each turn is a card (the person's tinted and set in), a
message's actions are pills drawn only while the pointer is over it or the keyboard is in it
(their room kept, so nothing moves), and an empty chat names its model, what it can do and
starter prompts that fill the message box.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QPointF, Qt
from PySide6.QtGui import QMouseEvent, QTextCursor, QTextDocument, QTextFormat, QTextFrame
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from desktop import theme
from desktop.app import DesktopApp
from desktop.controller import ModelChoice
from desktop.history import ChatMessage
from desktop.views.empty_chat import DEMO_STARTERS, abilities_of, abilities_text, intro_for
from desktop.views.transcript import (
    USER_INDENT,
    ActionRun,
    TranscriptView,
    boxes_in,
    render_transcript,
)
from tests.desktop.test_chat_actions import click_link
from tests.desktop.test_windows import ready_chat

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CHAT: list[ChatMessage] = [
    {"role": "user", "content": "Reverse a string"},
    {"role": "assistant", "content": "Use a slice:\n\n```python\ntext[::-1]\n```", "model": "m"},
    {"role": "user", "content": "Thanks"},
    {"role": "assistant", "content": "You are welcome.", "model": "m"},
]


def cards(document: QTextDocument) -> list[QTextFrame]:
    return list(document.rootFrame().childFrames())


def drawn(document: QTextDocument, run: ActionRun) -> bool:
    """Whether an action pill is drawn (its text has a visible colour)."""
    cursor = QTextCursor(document)
    cursor.setPosition(run.start + 1)
    return cursor.charFormat().foreground().color().alpha() > 0


def test_each_turn_is_a_card_the_persons_tinted_and_set_in(qapp: QApplication) -> None:
    document = QTextDocument()
    rendered = render_transcript(document, CHAT)
    found = cards(document)
    assert len(found) == len(CHAT)
    user, reply = found[0].frameFormat(), found[1].frameFormat()
    assert user.background().color() == theme.colour("user_card_background")
    assert reply.background().color() == theme.colour("card_background")
    assert user.background().color() != reply.background().color()
    assert user.leftMargin() == USER_INDENT and reply.leftMargin() == 0
    assert user.border() >= 1 and user.padding() > 0
    # No horizontal rules between turns any more: the cards part them.
    block = document.begin()
    while block.isValid():
        ruled = block.blockFormat().property(QTextFormat.Property.BlockTrailingHorizontalRulerWidth)
        assert not ruled, block.text()
        block = block.next()
    # The code block is a box inside its card, its header bar still there.
    assert len(boxes_in(document)) == 1
    assert "python" in document.toPlainText() and "Copy" in document.toPlainText()
    # Every action is hidden until asked for.
    assert rendered.actions and all(
        not drawn(document, run) for runs in rendered.actions.values() for run in runs
    )


def test_actions_show_on_hover_and_keyboard_focus_and_nothing_moves(qtbot: QtBot) -> None:
    view = TranscriptView()
    qtbot.addWidget(view)
    view.resize(600, 500)
    view.show()
    view.show_conversation(CHAT, None, fallback_model="m")
    document = view.document()
    runs = view._actions
    height = document.size().height()

    def hover(position: int) -> None:
        cursor = QTextCursor(document)
        cursor.setPosition(position)
        point = view.cursorRect(cursor).center()
        move = QMouseEvent(
            QEvent.Type.MouseMove,
            QPointF(point),
            QPointF(view.viewport().mapToGlobal(point)),
            Qt.MouseButton.NoButton,
            Qt.MouseButton.NoButton,
            Qt.KeyboardModifier.NoModifier,
        )
        QApplication.sendEvent(view.viewport(), move)

    start, end = view._spans[1]
    hover((start + end) // 2)  # over the first reply
    assert view.actions_shown == 1
    assert all(drawn(document, run) for run in runs[1])
    assert not any(drawn(document, run) for run in runs[0] + runs[3])
    assert document.size().height() == height  # drawing them moved nothing

    QApplication.sendEvent(view, QEvent(QEvent.Type.Leave))
    assert view.actions_shown is None
    assert not any(drawn(document, run) for run in runs[1])

    # The keyboard: Tab from the top reaches the first message's Copy and draws its pills.
    view.setFocus()
    view.moveCursor(QTextCursor.MoveOperation.Start)
    qtbot.keyClick(view, Qt.Key.Key_Tab)
    assert view.textCursor().charFormat().anchorHref() == "action:copy/0"
    assert view.actions_shown == 0 and all(drawn(document, run) for run in runs[0])

    # A re-render while streaming keeps the shown pills drawn.
    view.show_conversation(CHAT, None, fallback_model="m")
    assert all(drawn(document, run) for run in view._actions[0])


def test_an_empty_chat_names_the_model_and_a_starter_fills_the_box(
    qtbot: QtBot, desktop: DesktopApp
) -> None:
    window = ready_chat(qtbot, desktop)
    window.new_chat()
    text = window.transcript.toPlainText()
    demo = desktop.controller.choice(window.chat_model)
    assert demo is not None and demo.is_demo
    assert demo.label in text and "Try one:" in text and "calls tools" in text
    assert all(prompt in text for prompt in DEMO_STARTERS)

    click_link(qtbot, window, "starter:1")
    assert window.input.toPlainText() == DEMO_STARTERS[1] == "Count to twenty"
    assert window.focusWidget() is window.input
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        qtbot.keyClick(window.input, Qt.Key.Key_Return)
    # The demo model was trained on its starters: a real answer, not its fallback.
    assert window.last_reply is not None and window.last_reply.startswith("one two three")
    assert "Try one:" not in window.transcript.toPlainText()


def test_what_a_model_can_do_is_read_from_its_files() -> None:
    assert abilities_of(FIXTURES / "family-gpt-oss") == ("tools", "thinking")
    assert abilities_of(FIXTURES / "tiny-vlm") == ("vision",)
    assert abilities_of(FIXTURES / "tiny-coder") == ("tools",)
    vlm = ModelChoice("tiny-vlm", "Tiny VLM", FIXTURES / "tiny-vlm", ("CPU",), vision=True)
    intro = intro_for(vlm)
    assert intro is not None and intro.abilities == ("vision",)
    assert abilities_text(intro) == "Chats in text, sees images."
    assert intro.starters[0].startswith("Describe the picture")
    thinker = intro_for(ModelChoice("g", "G", FIXTURES / "family-gpt-oss", ("CPU",)))
    assert thinker is not None
    assert abilities_text(thinker) == "Chats in text, calls tools and thinks before answering."
    assert intro_for(None) is None
