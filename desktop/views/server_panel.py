"""The server view of the Requests window: the server's state and switch, where other
machines reach it, and the live log.

LM Studio's Developer tab: ``ServerStrip`` says whether the server runs and at which
address, with *Stop server* / *Start server*; when it serves beyond this computer (a bind
address other than loopback) it names the addresses other machines use
(:func:`engine.lan.lan_urls`) and whether an API key guards them. ``LiveLog`` shows
Sidelight's log as it is written (:mod:`desktop.log_tail`), following the end unless the
person scrolled up to read.

Threading: GUI thread only; the log is read by the Requests window's timer.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase, QTextOption
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from desktop.controller import Controller
from desktop.log_tail import MAX_LINES, LogTail, log_tail
from engine.lan import lan_urls
from engine.settings import is_loopback_host


class ServerStrip(QWidget):
    """The server's state, its addresses and the on/off switch."""

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.busy = False  # a start or stop is under way
        self.state = QLabel()
        self.state.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.lan = QLabel()
        self.lan.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.lan.setWordWrap(True)
        self.switch = QPushButton()
        self.switch.clicked.connect(self.toggle)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.state, 1)
        row.addWidget(self.switch)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.lan)
        controller.server_changed.connect(self.sync)
        self.sync()

    @property
    def running(self) -> bool:
        return self.controller.server_url is not None

    def sync(self) -> None:
        """Show the server as it is now."""
        self.busy = False
        controller, settings = self.controller, self.controller.settings
        url = controller.server_url
        if url is not None:
            self.state.setText(f"Server: <b>running</b> at {url}/v1")
            self.switch.setText("Stop server")
            self.switch.setToolTip("Apps and IDE plugins cannot reach Sidelight while it is off")
        else:
            error = controller.server_error
            self.state.setText("Server: <b>off</b>" + (f" — {error}" if error else ""))
            self.switch.setText("Start server")
            self.switch.setToolTip(f"Serve on {settings.host}:{settings.port} again")
        self.switch.setEnabled(True)
        self.lan.setText(self._lan_text(url))
        self.lan.setVisible(bool(self.lan.text()))

    def _lan_text(self, url: str | None) -> str:
        settings = self.controller.settings
        if url is None or is_loopback_host(settings.host):
            return ""
        port = int(url.rsplit(":", 1)[1]) if url.rsplit(":", 1)[1].isdigit() else settings.port
        urls = lan_urls(settings.host, port)
        if not urls:
            return f"Listening on {settings.host}, but this computer has no network address."
        key = (
            "an API key is required"
            if settings.api_key
            else "no API key: anyone on the network can use it"
        )
        return f"On your network: {', '.join(urls)} ({key})"

    def toggle(self) -> None:
        """Stop a running server, start a stopped one (returns at once)."""
        if self.busy:
            return
        self.busy = True
        self.switch.setEnabled(False)
        if self.running:
            self.state.setText("Server: stopping…")
            self.controller.stop_server()
        else:
            self.state.setText("Server: starting…")
            self.controller.start_server()


class LiveLog(QPlainTextEdit):
    """The log's newest lines, appended as they come; it follows the end while the person
    has not scrolled up.

    Lines wrap at the panel's width. Unwrapped, the view scrolled sideways by itself: lines
    read while the window is hidden (its ``showEvent`` refreshes before it is shown) make
    Qt show the text cursor, at the end of the last line, on the first show, cutting off
    the start of every line. A log beside a table is narrow; each line is read whole."""

    def __init__(self, tail: LogTail | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.tail = tail or log_tail()
        self.shown = 0  # the number of the last line shown
        self.setReadOnly(True)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.setMaximumBlockCount(MAX_LINES)
        self.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.setPlaceholderText("Sidelight's log appears here as it is written.")
        self.setToolTip("Sidelight's log, live (the log file keeps it all)")

    def refresh(self) -> int:
        """Append the lines written since the last refresh; how many."""
        lines = self.tail.lines_after(self.shown)
        if not lines:
            return 0
        bar = self.verticalScrollBar()
        following = bar.value() >= bar.maximum() - 2
        for _number, text in lines:
            self.appendPlainText(text)
        self.shown = lines[-1][0]
        if following:
            bar.setValue(bar.maximum())
        return len(lines)
