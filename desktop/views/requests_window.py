"""``RequestsWindow``: the server view: the server's state and switch, its network
addresses, the requests it (and the chat) served, and the log beside them, all live.

It shows the request log the controller's :class:`engine.server.monitor.RequestMonitor`
keeps in memory: running requests first, then the finished ones, newest first. A timer
reads the log while the window is shown (the log is thread-safe; the server adds to it on
its own thread). The filter box matches any column. *Copy as curl* puts a command that
replays the selected request on the clipboard; it needs the request's body, so it works
only for requests made while *Keep request bodies* was on (that checkbox saves the
setting). Above the table the :class:`~desktop.views.server_panel.ServerStrip`, beside
it the :class:`~desktop.views.server_panel.LiveLog` (read by the same timer).

Threading: GUI thread only.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QPersistentModelIndex,
    QSize,
    QSortFilterProxyModel,
    Qt,
    QTimer,
)
from PySide6.QtGui import QBrush, QGuiApplication, QHideEvent, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from desktop import theme
from desktop.controller import Controller
from desktop.icons import icon
from desktop.views.screen import fit_to_screen
from desktop.views.server_panel import LiveLog, ServerStrip
from engine.server.monitor import API_KEY_VARIABLE, RequestEntry, curl_command
from engine.settings import SettingsError

logger = logging.getLogger(__name__)

REFRESH_MS = 500
COLUMNS = (
    "Time",
    "Dialect",
    "Route",
    "Client",
    "Model",
    "Status",
    "Prompt",
    "Cached",
    "Generated",
    "TTFT",
    "Tokens/s",
    "Duration",
    "Error",
)
# What each column must show whole (the error column takes the rest, its text the details).
_WIDEST = {
    "Time": "00:00:00",
    "Dialect": "anthropic",
    "Route": "/v1/chat/completions",
    "Client": "OpenAI/Python 1.9",
    "Model": "qwen2.5-coder-7b",
    "Status": "404 client error",
    "Prompt": "99999",
    "Cached": "99999",
    "TTFT": "999 ms",
    "Duration": "99.99 s",
}
_NUMERIC = frozenset({"Prompt", "Cached", "Generated", "TTFT", "Tokens/s", "Duration"})
_ERROR_COLOUR = theme.colour("error")  # live: follows the light/dark theme
_BODIES_OFF_TIP = (
    "Turn on “Keep request bodies” to copy requests as curl. Only requests made after "
    "that can be copied."
)
_NOT_KEPT_TIP = "This request's body was not kept (bodies were off, or it was over 4 MB)."


def cells(entry: RequestEntry) -> tuple[str, ...]:
    """The row for ``entry``, in :data:`COLUMNS` order."""
    clock = time.strftime("%H:%M:%S", time.localtime(entry.started_at))
    outcome = (entry.outcome or "").replace("_", " ")
    status = "running…" if entry.running else f"{entry.status} {outcome}"
    return (
        clock,
        entry.dialect,
        entry.route if entry.method in ("POST", "") else f"{entry.method} {entry.route}",
        entry.user_agent or ("Sidelight chat" if entry.dialect == "desktop" else ""),
        entry.model or entry.requested_model or "",
        status,
        str(entry.prompt_tokens) if entry.prompt_tokens else "",
        str(entry.cached_tokens) if entry.prompt_tokens else "",
        str(entry.generated_tokens) if entry.generated_tokens else "",
        _seconds(entry.ttft_seconds),
        f"{entry.tokens_per_second:.1f}" if entry.tokens_per_second else "",
        _seconds(entry.duration_seconds),
        entry.error or "",
    )


def details(entry: RequestEntry) -> str:
    """The line under the table for the selected request: what the columns cut short."""
    parts = [f"{entry.method or 'chat'} {entry.route}"]
    if entry.requested_model and entry.requested_model != entry.model:
        parts.append(f"asked for “{entry.requested_model}”")
    if entry.cached_tokens:
        share = entry.cached_tokens / entry.prompt_tokens if entry.prompt_tokens else 0.0
        parts.append(
            f"{entry.cached_tokens} of {entry.prompt_tokens} prompt tokens cached ({share:.1%})"
        )
    if entry.queue_seconds is not None:
        parts.append(f"waited {_seconds(entry.queue_seconds)} for the engine")
    if entry.error:
        parts.append(f"error: {entry.error}")
    return " · ".join(parts)


def _seconds(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


class RequestTable(QAbstractTableModel):
    """The rows of the window: one :class:`RequestEntry` each."""

    def __init__(self) -> None:
        super().__init__()
        self.entries: list[RequestEntry] = []
        self._cells: list[tuple[str, ...]] = []

    def set_entries(self, entries: list[RequestEntry]) -> None:
        self.beginResetModel()
        self.entries = entries
        self._cells = [cells(e) for e in entries]
        self.endResetModel()

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex | None = None) -> int:
        return 0 if parent is not None and parent.isValid() else len(self.entries)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex | None = None) -> int:
        return 0 if parent is not None and parent.isValid() else len(COLUMNS)

    def data(
        self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if not index.isValid():
            return None
        text = self._cells[index.row()][index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            return text
        if role == Qt.ItemDataRole.ToolTipRole:
            return text or None  # what a narrow column cuts short
        if role == Qt.ItemDataRole.TextAlignmentRole and COLUMNS[index.column()] in _NUMERIC:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ForegroundRole:
            outcome = self.entries[index.row()].outcome
            if outcome in ("client_error", "server_error"):
                return QBrush(_ERROR_COLOUR)
        return None

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        return None


class RequestsWindow(QWidget):
    """The request log as a live table, with a filter, *Copy as curl* and the body switch."""

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.setWindowTitle("Server and requests")  # Qt adds " — Sidelight"
        self.setWindowIcon(icon(""))
        self._shown_state: tuple[int, int] | None = None  # (last id, running) last shown

        self.filter = QLineEdit()
        self.filter.setPlaceholderText("Filter: model, route, client, status, error…")
        self.filter.setClearButtonEnabled(True)
        self.keep_bodies = QCheckBox("Keep request bodies")
        self.keep_bodies.setToolTip(
            "Keeps what clients send (it may hold your code) in memory only, never on disk, "
            "so requests can be copied as curl. Turning it off forgets the kept bodies."
        )
        self.keep_bodies.setChecked(controller.monitor.keep_bodies)
        self.keep_bodies.toggled.connect(self._on_keep_toggled)

        self.table = RequestTable()
        self.proxy = QSortFilterProxyModel(self)
        self.proxy.setSourceModel(self.table)
        self.proxy.setFilterKeyColumn(-1)  # every column
        self.proxy.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.filter.textChanged.connect(self._on_filter_changed)
        self.view = self._table_view()
        self.details = QLabel()
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.setWordWrap(True)

        self.summary = QLabel()
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.copy_curl = QPushButton("Copy as curl")
        self.copy_curl.clicked.connect(self.copy_selected_as_curl)

        self._lay_out()

        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self.refresh)
        fit_to_screen(self, QSize(1000, 520))
        self.refresh()

    def _lay_out(self) -> None:
        """The server strip above; the requests and, beside them, the live log."""
        top = QHBoxLayout()
        top.addWidget(self.filter, 1)
        top.addWidget(self.keep_bodies)
        bottom = QHBoxLayout()
        bottom.addWidget(self.summary, 1)
        bottom.addWidget(self.copy_curl)
        self.server = ServerStrip(self.controller)
        self.log = LiveLog()
        requests = QWidget()
        left = QVBoxLayout(requests)
        left.setContentsMargins(0, 0, 0, 0)
        left.addLayout(top)
        left.addWidget(self.view, 1)
        left.addWidget(self.details)
        left.addLayout(bottom)
        log_pane = QWidget()
        right = QVBoxLayout(log_pane)
        right.setContentsMargins(0, 0, 0, 0)
        right.addWidget(QLabel("<b>Log</b>"))
        right.addWidget(self.log, 1)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(requests)
        self.splitter.addWidget(log_pane)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        layout = QVBoxLayout(self)
        layout.addWidget(self.server)
        layout.addWidget(self.splitter, 1)

    def _table_view(self) -> QTableView:
        view = QTableView()
        view.setModel(self.proxy)
        view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        view.setWordWrap(False)
        view.verticalHeader().hide()
        header = view.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        view.selectionModel().selectionChanged.connect(self.sync_buttons)
        metrics = view.fontMetrics()
        padding = metrics.averageCharWidth() + 8  # the cell's margins
        for column, name in enumerate(COLUMNS[:-1]):
            text = max(_WIDEST.get(name, ""), name, key=metrics.horizontalAdvance)
            header.resizeSection(column, metrics.horizontalAdvance(text) + padding)
        return view

    def showEvent(self, event: QShowEvent) -> None:
        self.refresh()
        self._timer.start()  # read the log only while the window can be seen
        super().showEvent(event)

    def hideEvent(self, event: QHideEvent) -> None:
        self._timer.stop()
        super().hideEvent(event)

    # ---- the table ---------------------------------------------------------------------

    def refresh(self) -> None:
        """Show the log as it is now (nothing to do when it has not changed)."""
        self.log.refresh()
        log = self.controller.monitor.log
        running = log.running()
        state = (log.last_id, len(running))
        if state == self._shown_state and not running:
            return
        selected = self.selected_entry()
        finished = log.entries()
        self.table.set_entries(running[::-1] + finished[::-1])
        self._shown_state = state
        if selected is not None and selected.id:
            self._select(selected.id)
        self._show_summary(len(finished), len(running))
        self.sync_buttons()

    def _select(self, entry_id: int) -> None:
        for row, entry in enumerate(self.table.entries):
            if entry.id == entry_id:
                index = self.proxy.mapFromSource(self.table.index(row, 0))
                if index.isValid():
                    self.view.selectRow(index.row())
                return

    def _show_summary(self, finished: int, running: int) -> None:
        text = f"{finished} request{'s' if finished != 1 else ''}"
        if running:
            text += f", {running} running"
        self.summary.setText(text + " (newest first; the last 500 are kept)")

    def _on_filter_changed(self, text: str) -> None:
        self.proxy.setFilterFixedString(text)
        self.sync_buttons()

    def selected_entry(self) -> RequestEntry | None:
        rows = self.view.selectionModel().selectedRows()
        if not rows:
            return None
        source = self.proxy.mapToSource(rows[0])
        return self.table.entries[source.row()] if source.isValid() else None

    # ---- copy as curl and keeping bodies -----------------------------------------------

    def sync_buttons(self) -> None:
        """*Copy as curl* is on only for a selected request whose body was kept; the details
        line follows the selection."""
        entry = self.selected_entry()
        self.details.setText(details(entry) if entry is not None else "")
        if not self.controller.monitor.keep_bodies:
            enabled, tip = False, _BODIES_OFF_TIP
        elif entry is None:
            enabled, tip = False, "Select a request to copy it as a curl command."
        elif curl_command(entry) is None:
            enabled, tip = False, _NOT_KEPT_TIP
        else:
            enabled, tip = True, "Copies a curl command that sends this request again."
        self.copy_curl.setEnabled(enabled)
        self.copy_curl.setToolTip(tip)

    def copy_selected_as_curl(self) -> None:
        entry = self.selected_entry()
        command = curl_command(entry) if entry is not None else None
        if command is None:
            return
        QGuiApplication.clipboard().setText(command)
        note = "Copied the curl command."
        if f"${API_KEY_VARIABLE}" in command:
            note += f" It reads the API key from ${API_KEY_VARIABLE}."
        self.summary.setText(note)

    def _on_keep_toggled(self, keep: bool) -> None:
        try:
            self.controller.set_keep_request_bodies(keep)
        except (OSError, SettingsError) as exc:
            logger.warning("could not save keep_request_bodies: %s", exc)
            self.keep_bodies.blockSignals(True)
            self.keep_bodies.setChecked(not keep)
            self.keep_bodies.blockSignals(False)
            self.summary.setText(f"Could not save the setting: {exc}")
            return
        self._shown_state = None  # bodies may have been dropped: show the log again
        self.refresh()
