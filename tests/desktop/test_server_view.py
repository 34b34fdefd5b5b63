"""The server view (the Requests window): the server's state and its switch, the addresses
other machines use when it serves beyond loopback, and the live log beside the requests.
Real widgets, a real server and engine on the demo model."""

from __future__ import annotations

import logging
from collections.abc import Callable

import httpx
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QWidget
from pytestqt.qtbot import QtBot

from desktop.app import DesktopApp
from desktop.log_tail import LogTail
from desktop.views.server_panel import LiveLog
from engine.lan import lan_urls


def test_the_switch_stops_and_starts_the_server_and_the_log_says_so(
    qtbot: QtBot, desktop: DesktopApp, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)  # as the app's own logging setup does
    controller = desktop.controller
    window = desktop.requests_window
    window.show()
    strip = window.server
    url = controller.server_url
    assert url is not None
    assert strip.state.text() == f"Server: <b>running</b> at {url}/v1"
    assert strip.switch.text() == "Stop server"
    assert strip.lan.isHidden()  # loopback: no network address to give
    assert httpx.get(f"{url}/health", timeout=30).status_code == 200

    qtbot.mouseClick(strip.switch, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: controller.server_url is None, timeout=30000)
    assert strip.state.text() == "Server: <b>off</b>"
    assert strip.switch.text() == "Start server"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health", timeout=5)
    # The live log beside the requests shows what the log file gets, as it comes.
    qtbot.waitUntil(lambda: "the server was stopped" in window.log.toPlainText(), timeout=5000)

    qtbot.mouseClick(strip.switch, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: controller.server_url is not None, timeout=30000)
    again = controller.server_url
    assert strip.switch.text() == "Stop server"
    assert httpx.get(f"{again}/health", timeout=30).status_code == 200
    qtbot.waitUntil(lambda: f"serving on {again}/v1" in window.log.toPlainText(), timeout=5000)


def test_serving_beyond_loopback_names_the_network_addresses(
    qtbot: QtBot, make_desktop: Callable[..., DesktopApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIDELIGHT_HOST", "0.0.0.0")
    monkeypatch.setenv("SIDELIGHT_API_KEY", "a-long-secret-key-for-the-lan")
    desktop = make_desktop()
    window = desktop.requests_window
    window.show()
    url = desktop.controller.server_url
    assert url is not None
    port = int(url.rsplit(":", 1)[1])
    urls = lan_urls("0.0.0.0", port)  # this machine's own interfaces
    assert urls, "the test machine has no network address"
    lan = window.server.lan
    assert lan.isVisible()
    assert lan.text() == f"On your network: {', '.join(urls)} (an API key is required)"
    # Each address answers (the key asked for by the server, as the strip says).
    answer = httpx.get(urls[0].removesuffix("/v1") + "/v1/models", timeout=30)
    assert answer.status_code == 401


def test_the_live_log_shows_the_start_of_every_line(qtbot: QtBot) -> None:
    """Lines read while the window is hidden, the last one long, then the window shown (the
    Requests window refreshes its log in ``showEvent``, before it is visible): the log must
    not open scrolled sideways with the start of every line cut off, as a screenshot of the
    server view showed. A real LiveLog on its own tail."""
    tail = LogTail()
    source = logging.getLogger("tests.live_log")
    source.addHandler(tail)
    source.setLevel(logging.INFO)
    try:
        host = QWidget()
        qtbot.addWidget(host)
        log = LiveLog(tail)
        QHBoxLayout(host).addWidget(log)
        host.resize(420, 400)
        for number in range(30):
            source.info("POST /v1/chat/completions model=sidelight-demo %s", "x" * (number * 4))
        log.refresh()  # read before the first show
        host.show()
        qtbot.waitExposed(host)
        for number in range(3):
            source.info("short line %d", number)
            log.refresh()
    finally:
        source.removeHandler(tail)
    assert log.horizontalScrollBar().value() == 0
    assert log.horizontalScrollBar().maximum() == 0  # lines wrap: nothing lies off to the side
    assert log.contentOffset().x() == 0
    assert "short line 2" in log.toPlainText()
