"""``ChatList``: the earlier conversations beside the chat, to reopen, rename or delete.

A click (or Enter) opens a chat; F2, a double-click or *Rename* edits its name in place;
Delete or *Delete…* asks before removing its file.

Threading: GUI thread only; renaming and deleting write or remove one small file.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtGui import QKeyEvent, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from desktop.history import ChatHistory

_ID = Qt.ItemDataRole.UserRole
MAX_LISTED = 200


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

        self.list = QListWidget()
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
        layout.addWidget(self.list, 1)
        layout.addLayout(buttons)
        self.list.itemSelectionChanged.connect(self._sync_buttons)
        self.refresh()

    def refresh(self, current_id: str | None = None) -> None:
        """Re-read the folder; ``current_id`` (the open chat) is selected."""
        if current_id is not None:
            self.current_id = current_id
        self.list.blockSignals(True)
        self.list.clear()
        for conversation in self.history.list()[:MAX_LISTED]:
            item = QListWidgetItem(conversation.title)
            item.setData(_ID, conversation.id)
            item.setToolTip(conversation.title)
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
        menu.addAction("Delete…").triggered.connect(self.delete_selected)
        menu.popup(self.list.viewport().mapToGlobal(position))
