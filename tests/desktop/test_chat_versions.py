"""Regenerate keeps versions: the reply shows "1/2" between arrows, the arrows switch the
version shown, the versions are kept in the history, and the chat continues from the one
shown. Real widgets, the real engine on the demo model.

The replies are greedy and run past the end-of-turn token, so each version's length is the
chat's max tokens: two versions asked with different limits differ, and no test depends on
what the sampler happened to pick."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QTextCursor
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.chat import ChatOptions
from desktop.history import ChatHistory
from desktop.views.chat_window import ChatWindow
from engine.worker.messages import SamplingParams
from tests.desktop.test_chat_actions import active_chat, click_link, type_and_send

TO_THE_LIMIT = ChatOptions(sampling=SamplingParams(temperature=0, ignore_eos=True))


def click_arrow(qtbot: QtBot, window: ChatWindow, href: str) -> None:
    """Click the one-character link ``href`` in its middle, as a mouse would."""
    view = window.transcript
    document = view.document()
    block = document.begin()
    found = None
    while block.isValid() and found is None:
        fragments = block.begin()
        while not fragments.atEnd():
            fragment = fragments.fragment()
            if fragment.charFormat().anchorHref() == href:
                found = fragment.position()
                break
            fragments += 1
        block = block.next()
    assert found is not None, f"no link {href} in the transcript"
    cursor = QTextCursor(document)
    cursor.setPosition(found)
    view.setTextCursor(cursor)
    view.ensureCursorVisible()
    before = view.cursorRect(cursor)
    cursor.setPosition(found + 1)
    after = view.cursorRect(cursor)
    point = QPoint((before.left() + after.left()) // 2, before.center().y())
    assert view.anchorAt(point) == href, (view.anchorAt(point), point, before, after)
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=point)


def test_regenerate_keeps_versions_that_switch_and_carry_on(
    qtbot: QtBot, make_desktop: Callable[..., DesktopApp]
) -> None:
    desktop = make_desktop(chat_options=TO_THE_LIMIT)
    window = active_chat(qtbot, desktop)
    window.conversation.settings.max_tokens = 6
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        type_and_send(qtbot, window, "Hello")
    first = window.conversation.messages[1]["content"]
    assert "1/2" not in window.transcript.toPlainText()  # one version: no arrows

    window.conversation.settings.max_tokens = 12
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        click_link(qtbot, window, "action:regenerate/1")
    messages = window.conversation.messages
    assert [m["role"] for m in messages] == ["user", "assistant"]  # not a second reply
    reply = messages[1]
    second = reply["content"]
    assert [v["content"] for v in reply.get("versions", [])] == [first, second]
    assert [v.get("figures", {}).get("tokens") for v in reply.get("versions", [])] == [6, 12]
    assert "\u2039 2/2 \u203a" in window.transcript.toPlainText()

    # The arrow before the count shows the first version again, on screen and in the file.
    click_arrow(qtbot, window, "action:previous/1")
    assert window.conversation.messages[1]["content"] == first
    assert "\u2039 1/2 \u203a" in window.transcript.toPlainText()
    assert (
        first in window.transcript.toPlainText() and second not in window.transcript.toPlainText()
    )
    saved = ChatHistory(window.history.folder).get(window.conversation.id)
    assert saved is not None
    assert (saved.messages[1]["content"], saved.messages[1].get("version")) == (first, 0)
    assert len(saved.messages[1].get("versions", [])) == 2

    # The chat continues from the version shown: it is what the model gets back.
    sent = window.conversation.engine_messages()
    assert sent[1] == {"role": "assistant", "content": first}
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        type_and_send(qtbot, window, "Tell me more")
    assert [m["content"] for m in window.conversation.messages[:2]] == ["Hello", first]

    # The other arrow goes back to the newest version.
    click_arrow(qtbot, window, "action:next/1")
    assert window.conversation.messages[1]["content"] == second
    assert "\u2039 2/2 \u203a" in window.transcript.toPlainText()
