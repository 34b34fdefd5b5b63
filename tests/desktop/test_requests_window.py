"""The Requests window on the real engine and server: opened from the tray, it shows a request
the ``openai`` SDK makes (live), filters, and its "Copy as curl" replays that request."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import openai
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.views.requests_window import COLUMNS, RequestsWindow, cells, details
from engine.server.monitor.record import OpenRequest
from engine.settings import load_settings
from tests.conftest import dialogue

LEFT = Qt.MouseButton.LeftButton


def open_from_tray(qtbot: QtBot, desktop: DesktopApp) -> RequestsWindow:
    menu = desktop.tray.menu
    menu.aboutToShow.emit()
    with qtbot.waitSignal(menu.open_requests):
        next(a for a in menu.actions() if a.text() == "Requests…").trigger()
    window = desktop.requests_window
    assert window.isVisible()
    area = window.screen().availableGeometry()  # the small laptop screen (conftest)
    assert area.contains(window.frameGeometry()), (window.frameGeometry(), area)
    return window


def row_texts(window: RequestsWindow) -> list[dict[str, str]]:
    """The rows as shown (after the filter), by column name."""
    proxy = window.proxy
    return [
        {name: proxy.index(row, column).data() for column, name in enumerate(COLUMNS)}
        for row in range(proxy.rowCount())
    ]


def test_a_live_sdk_request_shows_and_its_curl_replays_it(
    qtbot: QtBot, desktop: DesktopApp, dialogues: dict[str, Any]
) -> None:
    window = open_from_tray(qtbot, desktop)
    assert not window.keep_bodies.isChecked()
    assert not window.copy_curl.isEnabled()
    assert "Keep request bodies" in window.copy_curl.toolTip()

    qtbot.mouseClick(window.keep_bodies, LEFT)  # saved, and applied at once
    assert desktop.controller.monitor.keep_bodies
    assert load_settings().keep_request_bodies is True
    assert json.loads(desktop.controller.settings.paths.config_file.read_text()) == {
        "keep_request_bodies": True
    }

    base_url = desktop.controller.api_base_url
    assert base_url is not None
    with openai.OpenAI(base_url=base_url, api_key="local", max_retries=0) as client:
        answer = client.chat.completions.create(
            model="sidelight-demo",
            messages=[{"role": "user", "content": "Hello"}],
            temperature=0,
        )
    reply = answer.choices[0].message.content
    assert reply == dialogue(dialogues, "hello")["reply"]

    qtbot.waitUntil(lambda: len(row_texts(window)) == 1, timeout=5000)  # the timer found it
    [row] = row_texts(window)
    assert row["Dialect"] == "openai"
    assert row["Route"] == "/v1/chat/completions"
    assert row["Model"] == "sidelight-demo"
    assert row["Status"] == "200 ok"
    assert answer.usage is not None
    assert row["Prompt"] == str(answer.usage.prompt_tokens)
    assert answer.usage.prompt_tokens_details is not None
    assert row["Cached"] == str(answer.usage.prompt_tokens_details.cached_tokens)
    assert row["Generated"] == str(answer.usage.completion_tokens)
    assert row["TTFT"].endswith(" ms") and float(row["Tokens/s"]) > 0
    assert row["Client"].startswith("OpenAI/Python")
    assert row["Error"] == ""

    qtbot.keyClicks(window.filter, "no such thing")
    assert row_texts(window) == []
    window.filter.clear()
    qtbot.keyClicks(window.filter, "COMPLETIONS")  # any column, any case
    assert len(row_texts(window)) == 1

    window.view.selectRow(0)
    assert window.details.text().startswith("POST /v1/chat/completions · waited ")
    assert window.copy_curl.isEnabled()
    qtbot.mouseClick(window.copy_curl, LEFT)
    command = QApplication.clipboard().text()
    assert command.startswith("curl ") and "local" not in command  # the key is not in it
    assert "SIDELIGHT_API_KEY" in window.summary.text()
    replayed = subprocess.run(
        ["bash", "-c", command],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "SIDELIGHT_API_KEY": "local"},
    )
    again = json.loads(replayed.stdout)
    assert again["choices"][0]["message"]["content"] == reply
    # The replay's row (newest first) shows the prompt tokens its usage says were cached.
    qtbot.waitUntil(lambda: len(row_texts(window)) == 2, timeout=5000)
    newest = row_texts(window)[0]
    assert newest["Cached"] == str(again["usage"]["prompt_tokens_details"]["cached_tokens"])

    # Off again: the kept bodies are forgotten and copying is off, with the reason.
    qtbot.mouseClick(window.keep_bodies, LEFT)
    assert all(e.body is None for e in desktop.controller.monitor.log.entries())
    assert not window.copy_curl.isEnabled()
    assert "Keep request bodies" in window.copy_curl.toolTip()


def test_the_chat_windows_replies_are_listed_too(qtbot: QtBot, desktop: DesktopApp) -> None:
    window = open_from_tray(qtbot, desktop)
    chat = desktop.chat
    with qtbot.waitSignal(chat.reply_finished, timeout=30000):
        chat.send("Hello")
    qtbot.waitUntil(lambda: len(row_texts(window)) == 1, timeout=5000)
    [row] = row_texts(window)
    assert (row["Dialect"], row["Route"], row["Client"]) == (
        "desktop",
        "in-process",
        "Sidelight chat",
    )
    assert row["Status"] == "200 ok" and int(row["Generated"]) > 5
    window.view.selectRow(0)
    assert not window.copy_curl.isEnabled()  # bodies are off (and the chat has no HTTP body)


def test_without_a_tray_the_chat_menu_opens_it(qtbot: QtBot, desktop: DesktopApp) -> None:
    menu = desktop.chat.menu_button.menu()
    next(a for a in menu.actions() if a.text() == "Requests…").trigger()
    assert desktop.requests_window.isVisible()


def test_attaching_a_file_leaves_no_running_request(
    qtbot: QtBot, desktop: DesktopApp, tmp_path: Path
) -> None:
    """Issue 28: an attachment's token count stayed "running…" in the window and the API,
    its duration climbing for good. It is one finished request now."""
    chat = desktop.chat
    menu = chat.menu_button.menu()
    next(a for a in menu.actions() if a.text() == "Requests…").trigger()
    window = desktop.requests_window
    notes = tmp_path / "notes.txt"
    notes.write_text("The river is long.\nIt runs to the sea.\n", encoding="utf-8")
    attached = chat.pending_attachments
    attached.add_file(notes)
    qtbot.waitUntil(lambda: attached.counting == 0, timeout=15000)
    tokens = attached.items[0]["tokens"]
    assert tokens > 0

    log = desktop.controller.monitor.log
    assert log.running() == []
    qtbot.waitUntil(lambda: len(row_texts(window)) == 1, timeout=5000)
    [row] = row_texts(window)
    assert row["Status"] == "200 ok" and row["Route"] == "in-process"
    assert int(row["Prompt"]) == tokens

    url = f"{desktop.controller.server_url}/api/sidelight/requests"
    with urllib.request.urlopen(url, timeout=10) as answer:
        listed = json.loads(answer.read())
    assert listed["running"] == []
    [entry] = listed["data"]
    assert (entry["outcome"], entry["prompt_tokens"], entry["generated_tokens"]) == (
        "ok",
        tokens,
        0,
    )


def test_a_cached_prompt_shows_its_share_in_the_details() -> None:
    """The row's *Cached* cell and the details line, for a second agent turn."""
    entry = OpenRequest(dialect="anthropic", method="POST", route="/v1/messages")
    entry.prompt_tokens, entry.cached_tokens = 26_240, 26_208
    snapshot = entry.snapshot(id=7, status=200, outcome="ok")
    row = dict(zip(COLUMNS, cells(snapshot), strict=True))
    assert (row["Prompt"], row["Cached"]) == ("26240", "26208")
    assert "26208 of 26240 prompt tokens cached (99.9%)" in details(snapshot)
    entry.cached_tokens = 0
    assert "cached" not in details(entry.snapshot(id=8, status=200, outcome="ok"))
