"""The chat list finds chats (by title and by what was said), says when each last changed,
and exports one as Markdown or JSON from its menu. Real widgets, the real engine on the demo
model. The save dialog is the platform's own (it cannot be driven offscreen): it is stood in
for by the path a person would pick, and everything after it is real."""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from datetime import date, datetime
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.chat_export import matches
from desktop.history import Conversation
from desktop.views.chat_list import ChatList, when_text
from desktop.views.chat_window import ChatWindow
from tests.desktop.test_chat_actions import active_chat, type_and_send


def _chat(qtbot: QtBot, window: ChatWindow, text: str) -> str:
    """Start a new chat, send ``text``, wait for the reply; the chat's id."""
    window.new_chat()
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        type_and_send(qtbot, window, text)
    return window.conversation.id


def _listed(chats: ChatList) -> list[str]:
    return [
        str(chats.list.item(row).data(Qt.ItemDataRole.UserRole))
        for row in range(chats.list.count())
    ]


def _menu_action(qtbot: QtBot, chats: ChatList, chat_id: str, text: str) -> None:
    """Open the row's right-click menu and pick ``text`` in it."""
    item = chats.item_for(chat_id)
    assert item is not None
    chats._context_menu(chats.list.visualItemRect(item).center())
    menu = chats.last_menu
    assert menu is not None
    action = next(a for a in menu.actions() if a.text() == text)
    action.trigger()
    menu.close()


def test_search_filters_by_title_and_text_and_rows_have_dates(
    qtbot: QtBot, desktop: DesktopApp
) -> None:
    window = active_chat(qtbot, desktop)
    hello = _chat(qtbot, window, "Hello")
    count = _chat(qtbot, window, "Count with me")
    window.chats_button.click()
    chats = window.chat_list
    assert set(_listed(chats)) >= {hello, count}
    chats.rename(hello, "Greetings")

    qtbot.keyClicks(chats.search, "count")  # a word of the message, not of any title but one
    assert _listed(chats) == [count]
    chats.search.clear()
    qtbot.keyClicks(chats.search, "GREETINGS")  # the name given, any case
    assert _listed(chats) == [hello]
    reply = window.history.get(hello)
    assert reply is not None
    word = max(reply.messages[1]["content"].split(), key=len)  # what the model said
    chats.search.clear()
    qtbot.keyClicks(chats.search, word)
    assert hello in _listed(chats)
    assert all(matches(c, word) for c in window.history.list() if c.id in _listed(chats))
    chats.search.clear()
    qtbot.keyClicks(chats.search, "count zebra")  # every word must be there
    assert _listed(chats) == [] and chats.no_match.isVisible()
    chats.search.clear()
    assert set(_listed(chats)) >= {hello, count} and not chats.no_match.isVisible()

    # Each row says when the chat last changed: today, as its time.
    for row in range(chats.list.count()):
        when = chats.list.item(row).data(Qt.ItemDataRole.UserRole + 1)
        assert re.fullmatch(r"\d\d:\d\d", when), when
    assert (
        chats.list.visualItemRect(chats.list.item(0)).height() >= 2 * chats.fontMetrics().height()
    )


def test_dates_read_as_a_person_says_them() -> None:
    today = date(2026, 12, 2)
    stamp = lambda *when: datetime(*when).timestamp()  # noqa: E731
    assert when_text(stamp(2026, 12, 2, 9, 5), today) == "09:05"
    assert when_text(stamp(2026, 12, 1, 23, 0), today) == "Yesterday"
    assert when_text(stamp(2026, 3, 7, 12, 0), today) == "7 Mar"
    assert when_text(stamp(2025, 11, 30, 12, 0), today) == "30 Nov 2025"


@pytest.mark.parametrize("kind", ["markdown", "json"])
def test_a_chat_exports_from_its_menu(
    qtbot: QtBot,
    desktop: DesktopApp,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
) -> None:
    window = active_chat(qtbot, desktop)
    chat_id = _chat(qtbot, window, "Hello")
    with qtbot.waitSignal(window.reply_finished, timeout=30000):
        type_and_send(qtbot, window, "Count with me")
    window.chats_button.click()
    chats = window.chat_list
    picked = tmp_path / "exported"
    asked: list[str] = []

    def save_dialog(*args: object, **_kwargs: object) -> tuple[str, str]:
        asked.append(str(args[2]))  # the file name it suggests
        return str(picked), ""

    monkeypatch.setattr(QFileDialog, "getSaveFileName", save_dialog)
    label = "Export as Markdown…" if kind == "markdown" else "Export as JSON…"
    _menu_action(qtbot, chats, chat_id, label)
    saved = window.history.get(chat_id)
    assert saved is not None
    suffix = ".md" if kind == "markdown" else ".json"
    assert asked == [str(Path.home() / f"Hello{suffix}")]
    assert chats.last_export == picked.with_suffix(suffix)
    text = picked.with_suffix(suffix).read_text(encoding="utf-8")
    if kind == "json":
        # The chat as the history keeps it: it reads back the same.
        assert json.loads(text) == asdict(saved)
        assert Conversation.from_dict(json.loads(text)).messages == saved.messages
        return
    headings = [line for line in text.splitlines() if line.startswith("#")]
    model = saved.messages[1].get("model", "")
    assert headings == ["# Hello", "## You", f"## {model}", "## You", f"## {model}"]
    for message in saved.messages:
        assert message["content"] in text
