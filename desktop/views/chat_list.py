"""``ChatList``: the earlier conversations beside the chat, to find, reopen, rename, export
or delete.

Each row has the chat's title and, under it, when it last changed ("14:05", "Yesterday",
"3 Nov"). The search box above filters the list by title and by the text of the messages
(every word must be there). A click (or Enter) opens a chat; F2, a double-click or *Rename*
edits its name in place; Delete or *Delete…* asks before removing its file; the right-click
menu exports it as Markdown or JSON (:mod:`desktop.chat_export`).

Threading: GUI thread only; renaming and deleting write or remove one small file.
"""

from __future__ import annotations

import logging
import time
from datetime import date, datetime, timedelta
from pathlib import Path

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QPoint, QRect, QSize, Qt, Signal
from PySide6.QtGui import QKeyEvent, QKeySequence, QPainter, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from desktop.chat_export import ExportFormat, export, file_name, matches
from desktop.history import ChatHistory, Conversation

logger = logging.getLogger(__name__)

_ID = Qt.ItemDataRole.UserRole
_WHEN = Qt.ItemDataRole.UserRole + 1  # the row's date line
_PAD = 3  # pixels above and below a row's two lines
MAX_LISTED = 200
_EXPORT_FILTERS: dict[ExportFormat, str] = {
    "markdown": "Markdown (*.md)",
    "json": "JSON (*.json)",
}


def when_text(stamp: float, today: date | None = None) -> str:
    """When a chat last changed, as the list says it: the time today, "Yesterday", the
    day this year, else the day and the year."""
    moment = datetime.fromtimestamp(stamp)
    today = today or date.today()
    if moment.date() == today:
        return moment.strftime("%H:%M")
    if moment.date() == today - timedelta(days=1):
        return "Yesterday"
    day = str(moment.day)  # no leading zero, on every platform
    if moment.year == today.year:
        return f"{day} {moment.strftime('%b')}"
    return f"{day} {moment.strftime('%b %Y')}"


class _TwoLines(QStyledItemDelegate):
    """A row as the title over a dimmer date line (editing edits the title alone)."""

    def sizeHint(
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> QSize:
        size = super().sizeHint(option, index)
        return QSize(size.width(), size.height() + option.fontMetrics.height() + 2 * _PAD)

    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> None:
        item = QStyleOptionViewItem(option)
        self.initStyleOption(item, index)
        title = item.text
        item.text = ""
        widget = item.widget
        style = widget.style() if widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, item, painter, widget)
        selected = bool(item.state & QStyle.StateFlag.State_Selected)
        palette = item.palette
        rect: QRect = item.rect.adjusted(4, _PAD, -4, -_PAD)
        metrics = item.fontMetrics
        line = metrics.height()
        painter.save()
        role = QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text
        painter.setPen(palette.color(role))
        top = QRect(rect.left(), rect.top(), rect.width(), line)
        elided = metrics.elidedText(title, Qt.TextElideMode.ElideRight, rect.width())
        painter.drawText(top, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, elided)
        if not selected:
            painter.setPen(palette.color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text))
        bottom = QRect(rect.left(), rect.top() + line, rect.width(), line)
        when = str(index.data(_WHEN) or "")
        painter.drawText(bottom, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, when)
        painter.restore()


class ChatList(QWidget):
    """``picked(id)``: open that chat. ``renamed(id)`` and ``deleted(id)`` follow the files."""

    picked = Signal(str)
    renamed = Signal(str)
    deleted = Signal(str)

    def __init__(self, history: ChatHistory, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.history = history
        self.current_id: str | None = None
        self.confirmation: QMessageBox | None = None  # the open "Delete?" question
        self.last_menu: QMenu | None = None  # the context menu open last (tests read it)
        self.last_export: Path | None = None  # the file the last export wrote (tests read it)
        self._conversations: list[Conversation] = []  # as read by the last refresh

        self.search = QLineEdit()
        self.search.setPlaceholderText("Search chats")
        self.search.setToolTip("Show the chats whose title or messages have these words")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(lambda _text: self._fill())
        self.no_match = QLabel("No chat has these words.")
        self.no_match.setWordWrap(True)
        self.no_match.setEnabled(False)  # the palette's muted text
        self.no_match.hide()
        self.list = QListWidget()
        self.list.setItemDelegate(_TwoLines(self.list))
        self.list.setEditTriggers(
            QAbstractItemView.EditTrigger.EditKeyPressed
            | QAbstractItemView.EditTrigger.DoubleClicked
        )
        # Long titles end in "…" (the tooltip has them whole) rather than scroll sideways.
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._context_menu)
        self.list.itemClicked.connect(self._open)
        self.list.itemActivated.connect(self._open)
        self.list.itemChanged.connect(self._on_item_changed)
        self.rename_button = QPushButton("Rename")
        self.rename_button.setToolTip("Rename the selected chat (F2)")
        self.rename_button.clicked.connect(self.rename_selected)
        self.delete_button = QPushButton("Delete…")
        self.delete_button.setToolTip("Delete the selected chat (Del)")
        self.delete_button.clicked.connect(self.delete_selected)
        buttons = QHBoxLayout()
        buttons.addWidget(self.rename_button)
        buttons.addWidget(self.delete_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.search)
        layout.addWidget(self.no_match)
        layout.addWidget(self.list, 1)
        layout.addLayout(buttons)
        self.list.itemSelectionChanged.connect(self._sync_buttons)
        self.refresh()

    def refresh(self, current_id: str | None = None) -> None:
        """Re-read the folder; ``current_id`` (the open chat) is selected."""
        if current_id is not None:
            self.current_id = current_id
        self._conversations = self.history.list()
        self._fill()

    def _fill(self) -> None:
        """Show the chats the search matches (all without one), newest first."""
        query = self.search.text()
        shown = [c for c in self._conversations if matches(c, query)][:MAX_LISTED]
        self.no_match.setVisible(bool(query.strip()) and not shown)
        self.list.blockSignals(True)
        self.list.clear()
        for conversation in shown:
            item = QListWidgetItem(conversation.title)
            item.setData(_ID, conversation.id)
            when = when_text(conversation.updated or time.time())
            item.setData(_WHEN, when)
            item.setToolTip(f"{conversation.title}\n{when}")
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
            self.list.addItem(item)
            if conversation.id == self.current_id:
                item.setSelected(True)
                self.list.setCurrentItem(item)
        self.list.blockSignals(False)
        self._sync_buttons()

    def titles(self) -> list[str]:
        return [self.list.item(row).text() for row in range(self.list.count())]

    def item_for(self, conversation_id: str) -> QListWidgetItem | None:
        for row in range(self.list.count()):
            item = self.list.item(row)
            if item.data(_ID) == conversation_id:
                return item
        return None

    # ---- rename and delete -------------------------------------------------------------

    def rename_selected(self) -> None:
        if self.list.currentRow() >= 0:
            self.list.editItem(self.list.currentItem())

    def rename(self, conversation_id: str, name: str) -> None:
        """Give the chat a name; an empty name goes back to its first message."""
        conversation = self.history.get(conversation_id)
        if conversation is None:
            return
        conversation.name = " ".join(name.split()) or None
        self.history.save(conversation, touch=False)
        self.refresh()
        self.renamed.emit(conversation_id)

    def export_selected(self, kind: ExportFormat) -> Path | None:
        """Ask where, then write the selected chat as ``kind``; the file written (None when
        the person cancelled or it could not be written: then a message says why)."""
        item = self.list.currentItem()
        conversation = self.history.get(str(item.data(_ID))) if item is not None else None
        if conversation is None:
            return None
        suggested = str(Path.home() / file_name(conversation, kind))
        chosen, _ = QFileDialog.getSaveFileName(
            self, "Export chat", suggested, _EXPORT_FILTERS[kind]
        )
        if not chosen:
            return None
        try:
            written = export(conversation, Path(chosen), kind)
        except OSError as exc:
            logger.warning("cannot export the chat to %s: %s", chosen, exc)
            QMessageBox.warning(
                self, "Export chat", f"Could not write {chosen}: {exc.strerror or exc}"
            )
            return None
        self.last_export = written
        return written

    def delete_selected(self) -> None:
        """Ask, then delete the selected chat (non-blocking: the answer arrives later)."""
        if self.list.currentRow() < 0:
            return
        item = self.list.currentItem()
        conversation_id, title = str(item.data(_ID)), item.text()
        box = QMessageBox(
            QMessageBox.Icon.Question,
            "Delete chat",
            f"Delete “{title}”? This cannot be undone.",
            QMessageBox.StandardButton.Cancel,
            self,
        )
        delete = box.addButton("Delete", QMessageBox.ButtonRole.DestructiveRole)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.finished.connect(lambda _: self._confirmed(box, conversation_id, delete))
        self.confirmation = box
        box.open()

    def _confirmed(self, box: QMessageBox, conversation_id: str, delete: QPushButton) -> None:
        self.confirmation = None
        box.deleteLater()
        if box.clickedButton() is not delete:
            return
        self.history.delete(conversation_id)
        self.refresh()
        self.deleted.emit(conversation_id)

    # ---- events ------------------------------------------------------------------------

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.matches(QKeySequence.StandardKey.Delete):
            self.delete_selected()
            return
        super().keyPressEvent(event)

    def _open(self, item: QListWidgetItem) -> None:
        conversation_id = str(item.data(_ID))
        if conversation_id != self.current_id:
            self.picked.emit(conversation_id)

    def _on_item_changed(self, item: QListWidgetItem) -> None:
        self.rename(str(item.data(_ID)), item.text())

    def _sync_buttons(self) -> None:
        selected = self.list.currentRow() >= 0
        self.rename_button.setEnabled(selected)
        self.delete_button.setEnabled(selected)

    def _context_menu(self, position: QPoint) -> None:
        item = self.list.itemAt(position)
        if item is None:
            return
        self.list.setCurrentItem(item)
        menu = QMenu(self)
        menu.addAction("Open").triggered.connect(lambda: self._open(item))
        menu.addAction("Rename").triggered.connect(self.rename_selected)
        menu.addAction("Export as Markdown…").triggered.connect(
            lambda: self.export_selected("markdown")
        )
        menu.addAction("Export as JSON…").triggered.connect(lambda: self.export_selected("json"))
        menu.addAction("Delete…").triggered.connect(self.delete_selected)
        menu.popup(self.list.viewport().mapToGlobal(position))
        self.last_menu = menu
