"""``RemotesPanel``: Settings → Remote servers, the registry ``sidelight remote`` edits.

A list of the remotes (name, URL, whether a key is set: the key itself is never shown) with
Remove, and a row to add one (name, URL, optional key). Each change is written to
``remotes.json`` at once (``engine.remotes.registry``: 0600, atomic); the running server
reads the file again within a second, so its models appear as ``MODEL@NAME`` without a
restart or the dialog's Save. A refused name or URL is shown under the row, never saved.

Threading: GUI thread only; each change writes one small file.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from engine.remotes.registry import RemoteError, add_remote, load_remotes, remove_remote

logger = logging.getLogger(__name__)


class RemotesPanel(QGroupBox):
    """The registered remote servers, editable in place (see the module docstring)."""

    def __init__(self, path: Path, parent: QWidget | None = None) -> None:
        super().__init__("Remote servers", parent)
        self._path = path
        self.list = QListWidget()
        self.list.setToolTip("Their models are offered as MODEL@NAME by every API")
        self.remove = QPushButton("Remove")
        self.remove.clicked.connect(self._remove)
        self.name = QLineEdit()
        self.name.setPlaceholderText("name, e.g. box")
        self.url = QLineEdit()
        self.url.setPlaceholderText("http://workstation:11680")
        self.key = QLineEdit()
        self.key.setPlaceholderText("API key (optional)")
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.add = QPushButton("Add")
        self.add.clicked.connect(self._add)
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setProperty("role", "error")  # coloured by desktop.theme
        self.error.hide()
        row = QHBoxLayout()
        for widget in (self.name, self.url, self.key, self.add):
            row.addWidget(widget)
        layout = QVBoxLayout(self)
        layout.addWidget(self.list)
        layout.addWidget(self.remove)
        layout.addLayout(row)
        layout.addWidget(self.error)
        self.reload()

    def reload(self) -> None:
        """Show the file as it is now (another ``sidelight remote`` may have changed it)."""
        self.list.clear()
        try:
            remotes = load_remotes(self._path)
        except RemoteError as exc:
            self._show_error(str(exc))
            remotes = []
        for remote in remotes:
            key = "key set" if remote.api_key else "no key"
            item = QListWidgetItem(f"{remote.name} — {remote.url} ({key})")
            item.setData(Qt.ItemDataRole.UserRole, remote.name)
            self.list.addItem(item)
        self.remove.setEnabled(bool(remotes))

    def _add(self) -> None:
        try:
            add_remote(self._path, self.name.text(), self.url.text(), self.key.text() or None)
        except RemoteError as exc:
            self._show_error(str(exc))
            return
        except OSError as exc:
            self._show_error(f"cannot write {self._path}: {exc.strerror or exc}")
            return
        self.error.hide()
        for field in (self.name, self.url, self.key):
            field.clear()
        self.reload()

    def _remove(self) -> None:
        items = self.list.selectedItems()
        if not items:
            return
        item = items[0]
        try:
            remove_remote(self._path, str(item.data(Qt.ItemDataRole.UserRole)))
        except (RemoteError, OSError) as exc:
            self._show_error(str(exc))
            return
        self.reload()

    def _show_error(self, text: str) -> None:
        self.error.setText(text)
        self.error.show()
