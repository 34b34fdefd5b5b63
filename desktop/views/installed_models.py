"""``InstalledModels``: the models on this computer, the one in use marked, *Settings…*,
*Use* and *Delete*.

The list holds the bundled demo model and every model in the store. The one the engine
serves (or is loading) is bold and says so; *Use* switches the engine through the
controller, as the tray's Models menu does; *Delete* is off, with the reason as its tooltip,
for the model in use and the demo model, so nothing is refused after the person asked.

Threading: GUI thread only.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QMessageBox,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from desktop.controller import Controller, ModelChoice
from desktop.store_text import human_size
from engine.store import StoredModel
from engine.store.facts import folder_size
from engine.supervisor.states import LOADING, READY


class InstalledModels(QWidget):
    """The installed models and their buttons. ``delete_requested(id)`` fires once the
    person confirmed; the owner runs the delete (it owns the jobs)."""

    delete_requested = Signal(str)
    settings_requested = Signal(str)  # *Settings…*: the owner opens the model's dialog

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.busy = False  # a store job runs: no delete meanwhile
        self._demo_bytes: int | None = None
        self.view = tree_widget(["Installed model", "Format", "Weights", "Size", "Devices"])
        self.view.itemSelectionChanged.connect(self.sync_buttons)
        self.settings_button = QPushButton("Settings…")
        self.settings_button.clicked.connect(self._on_settings_clicked)
        self.use_button = QPushButton("Use")
        self.use_button.clicked.connect(self._on_use_clicked)
        self.delete_button = QPushButton("Delete")
        self.delete_button.clicked.connect(self._on_delete_clicked)
        self.button_row = QHBoxLayout()  # the owner puts its own buttons at the front
        self.button_row.addStretch(1)
        self.button_row.addWidget(self.settings_button)
        self.button_row.addWidget(self.use_button)
        self.button_row.addWidget(self.delete_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.view, 1)
        layout.addLayout(self.button_row)
        controller.status_changed.connect(lambda _status: self.mark_active())
        controller.devices_changed.connect(self._on_devices)

    def fill(self, stored: list[StoredModel]) -> None:
        """Show the demo model and ``stored``, keeping the selection."""
        selected = self.selected_id()
        self.view.clear()
        demo = next((c for c in self.controller.models() if c.is_demo), None)
        if demo is not None:
            item = self._add(demo.id, "ir", "—", self._demo_size(demo), demo.devices)
            item.setToolTip(0, "Comes with Sidelight: a tiny model for trying things out.")
        for model in stored:
            m = model.manifest
            self._add(m.id, m.format, m.weights or "?", m.size_bytes, m.devices)
        if selected is not None:
            select_item(self.view, selected)
        self.mark_active()

    def mark_active(self) -> None:
        """Bold and "(in use)" for the model the engine serves ("(loading…)" meanwhile)."""
        active = self.controller.active_model_id
        state = self.controller.status.state
        for index in range(self.view.topLevelItemCount()):
            item = self.view.topLevelItem(index)
            if item is None:
                continue
            model_id = str(item.data(0, Qt.ItemDataRole.UserRole))
            in_use = model_id == active and state in (READY, LOADING)
            suffix = (" (loading…)" if state == LOADING else " (in use)") if in_use else ""
            item.setText(0, model_id + suffix)
            for column in range(item.columnCount()):
                font = item.font(column)
                font.setBold(in_use)
                item.setFont(column, font)
        for column in range(1, 5):  # bold text is wider
            self.view.resizeColumnToContents(column)
        self.sync_buttons()

    def selected_id(self) -> str | None:
        return selected_id(self.view)

    def select(self, model_id: str) -> None:
        select_item(self.view, model_id)

    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        self.sync_buttons()

    def sync_buttons(self) -> None:
        model_id = self.selected_id()
        use_tip = self.use_refusal(model_id)
        self.use_button.setEnabled(model_id is not None and use_tip is None)
        self.use_button.setToolTip(use_tip or f"Load {model_id} for chats and the API.")
        settings_tip = self.settings_refusal(model_id)
        self.settings_button.setEnabled(model_id is not None and settings_tip is None)
        self.settings_button.setToolTip(
            settings_tip
            or f"Context length, keep-loaded time, device and sampling defaults of {model_id}."
        )
        delete_tip = self.delete_refusal(model_id)
        self.delete_button.setEnabled(model_id is not None and delete_tip is None)
        self.delete_button.setToolTip(delete_tip or f"Delete {model_id} and its files.")

    def use_refusal(self, model_id: str | None) -> str | None:
        """Why *Use* is off for ``model_id`` (its tooltip), or None when it is on."""
        if model_id is None:
            return "Select an installed model to use it."
        if model_id == self.controller.active_model_id and self.controller.status.state in (
            READY,
            LOADING,
        ):
            return f"{model_id} is already in use."
        if self.controller.choice(model_id) is None:
            return f"{model_id} is not a chat model; apps use it through the API."
        return None

    def settings_refusal(self, model_id: str | None) -> str | None:
        """Why *Settings…* is off for ``model_id`` (its tooltip), or None when it is on."""
        if model_id is None:
            return "Select an installed model to change its settings."
        choice = self.controller.choice(model_id)
        if choice is not None and choice.is_demo:
            return "The demo model comes with Sidelight: it has no settings of its own."
        return None

    def delete_refusal(self, model_id: str | None) -> str | None:
        """Why *Delete* is off for ``model_id`` (its tooltip), or None when it is on."""
        if model_id is None:
            return "Select an installed model to delete it."
        if model_id == self.controller.active_model_id:
            return f"{model_id} is in use: switch to another model first."
        choice = self.controller.choice(model_id)
        if choice is not None and choice.is_demo:
            return "The demo model comes with Sidelight and cannot be deleted."
        if self.busy:
            return "Wait for the current job to finish."
        return None

    def use(self, model_id: str) -> None:
        """Switch the engine to ``model_id``, as the tray's Models menu does; returns at once."""
        self.controller.select_model(model_id)

    def _add(
        self, model_id: str, fmt: str, weights: str, size: int, devices: tuple[str, ...]
    ) -> QTreeWidgetItem:
        item = QTreeWidgetItem([model_id, fmt, weights, human_size(size), ""])
        item.setData(0, Qt.ItemDataRole.UserRole, model_id)
        item.setData(4, Qt.ItemDataRole.UserRole, list(devices))
        self._show_devices(item)
        self.view.addTopLevelItem(item)
        return item

    def _show_devices(self, item: QTreeWidgetItem) -> None:
        devices = tuple(item.data(4, Qt.ItemDataRole.UserRole) or ())
        here, elsewhere = self._devices_here(devices)
        item.setText(4, here)
        tip = f"Also runs on {elsewhere}, which this machine does not have." if elsewhere else ""
        item.setToolTip(4, tip)

    def _on_devices(self) -> None:
        """The devices were discovered (in the background): show which ones each model has."""
        for index in range(self.view.topLevelItemCount()):
            item = self.view.topLevelItem(index)
            if item is not None:
                self._show_devices(item)

    def _devices_here(self, devices: tuple[str, ...]) -> tuple[str, str]:
        """The model's device families this machine has, and the ones it lacks (all of
        them as "here" while the devices are still being discovered)."""
        found = self.controller.devices
        if found is None:
            return ", ".join(devices), ""
        kinds = {d.kind.upper() for d in found}
        here = [d for d in devices if d in kinds]
        elsewhere = [d for d in devices if d not in kinds]
        return ", ".join(here) or "none here", ", ".join(elsewhere)

    def _demo_size(self, demo: ModelChoice) -> int:
        if self._demo_bytes is None:  # a tiny folder that never changes: read it once
            self._demo_bytes = folder_size(demo.path)
        return self._demo_bytes

    def _on_use_clicked(self) -> None:
        model_id = self.selected_id()
        if model_id:
            self.use(model_id)

    def _on_settings_clicked(self) -> None:
        model_id = self.selected_id()
        if model_id and self.settings_refusal(model_id) is None:
            self.settings_requested.emit(model_id)

    def _on_delete_clicked(self) -> None:
        model_id = self.selected_id()
        if not model_id or self.delete_refusal(model_id):
            return
        answer = QMessageBox.question(
            self, "Delete model", f"Delete {model_id} and its files from this computer?"
        )
        if answer == QMessageBox.StandardButton.Yes:
            self.delete_requested.emit(model_id)


def tree_widget(headers: list[str], *, stretch: int = 0) -> QTreeWidget:
    """A flat list with columns; column ``stretch`` takes the room left (and elides)."""
    view = QTreeWidget()
    view.setHeaderLabels(headers)
    view.setRootIsDecorated(False)
    header = view.header()
    header.setStretchLastSection(stretch == len(headers) - 1)
    header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
    return view


def selected_id(view: QTreeWidget) -> str | None:
    items = view.selectedItems()
    return str(items[0].data(0, Qt.ItemDataRole.UserRole)) if items else None


def find_item(view: QTreeWidget, item_id: str) -> QTreeWidgetItem | None:
    for index in range(view.topLevelItemCount()):
        item = view.topLevelItem(index)
        if item is not None and item.data(0, Qt.ItemDataRole.UserRole) == item_id:
            return item
    return None


def select_item(view: QTreeWidget, item_id: str) -> None:
    for index in range(view.topLevelItemCount()):
        item = view.topLevelItem(index)
        if item is None:
            continue
        wanted = item.data(0, Qt.ItemDataRole.UserRole) == item_id
        item.setSelected(wanted)
        if wanted:  # the row asked for is the one in view, with the keyboard on it
            view.setCurrentItem(item)
            view.scrollToItem(item)
