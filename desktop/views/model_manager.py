"""``ModelManager``: the catalog (with what fits this machine), downloads, imports, deletes.

Every store job (download, conversion, GGUF import, delete) runs on the task manager's pool;
progress reports arrive on that thread and hop to the GUI thread before touching a widget.
One job runs at a time; Cancel sets its event and the job stops at its next chunk, keeping a
download's partial files so the next Download resumes.

Threading: GUI thread only.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from desktop.controller import Controller
from desktop.metrics import format_bytes
from desktop.taskman import TaskManager
from desktop.views.screen import fit_to_screen
from engine.models import ModelError
from engine.store import StoredModel, StoreError
from engine.store.catalog import Catalog, Fit, MachineInfo
from engine.store.errors import Cancelled
from engine.store.progress import Progress

logger = logging.getLogger(__name__)

_FIT_MARKS = {
    "fits": "✓ fits",
    "tight": "⚠ tight",
    "too-big": "✗ too big",
    "no-device": "✗ no device",
}


def describe_progress(progress: Progress) -> str:
    """``Downloading model.bin: 12 MB of 350 MB · 4 MB/s · 1 min left``."""
    verb = progress.phase.capitalize()
    item = f" {progress.item}" if progress.item else ""
    parts = [f"{verb}{item}"]
    if progress.total:
        parts.append(f"{format_bytes(progress.done)} of {format_bytes(progress.total)}")
    if progress.speed > 0:
        parts.append(f"{format_bytes(progress.speed)}/s")
    eta = progress.eta_seconds
    if eta is not None and progress.phase == "downloading":
        parts.append(f"{eta / 60:.0f} min left" if eta >= 90 else f"{eta:.0f} s left")
    if progress.message:
        parts.append(progress.message)
    return " · ".join(parts)


def _selected_id(view: QTreeWidget) -> str | None:
    items = view.selectedItems()
    return str(items[0].data(0, Qt.ItemDataRole.UserRole)) if items else None


class ModelManager(QDialog):
    """The "Download models…" dialog. ``job_finished(kind, outcome)`` reports each job's
    end: ``outcome`` is the StoredModel, ``"cancelled"`` or the error message."""

    job_finished = Signal(str, object)

    def __init__(
        self,
        controller: Controller,
        tasks: TaskManager,
        *,
        hub_endpoint: str | None = None,
        machine: MachineInfo | None = None,
        parent: QWidget | None = None,
    ) -> None:
        """Args:
        hub_endpoint: the model hub's address (``None``: huggingface_hub's default, which
            honours ``HF_ENDPOINT``).
        machine: this machine's memory and devices (``None``: detected in the background).
        """
        super().__init__(parent)
        self.controller = controller
        self.tasks = tasks
        self.hub_endpoint = hub_endpoint
        self.machine = machine
        self.catalog = Catalog.load()
        self.last_progress: Progress | None = None
        self._cancel: threading.Event | None = None
        self._job_kind: str | None = None
        self._installed: set[str] = set()  # ids in the store, as of the last _fill_installed
        self.setWindowTitle("Sidelight models")
        self._build()
        fit_to_screen(self, QSize(760, 560))
        controller.models_changed.connect(self._fill_installed)
        self._fill_installed()  # fills the catalog too
        if machine is None:
            self.tasks.run_in_background(MachineInfo.detect, self._on_machine)

    # ---- layout ------------------------------------------------------------------------

    def _build(self) -> None:
        self.catalog_view = self._tree(["Model", "Download", "Memory", "This machine", "Status"])
        self.download_button = QPushButton("Download")
        self.download_button.clicked.connect(self._on_download_clicked)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel_job)
        self.progress_bar = QProgressBar()
        self.progress_bar.setTextVisible(True)
        self.progress_label = QLabel(" ")
        self.progress_label.setWordWrap(True)
        self.progress_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        job_row = QHBoxLayout()
        job_row.addWidget(self.progress_bar, 1)
        job_row.addWidget(self.download_button)
        job_row.addWidget(self.cancel_button)

        self.installed_view = self._tree(
            ["Installed model", "Format", "Weights", "Size", "Devices"]
        )
        self.delete_button = QPushButton("Delete")
        self.delete_button.clicked.connect(self._on_delete_clicked)
        self.import_button = QPushButton("Import GGUF…")
        self.import_button.clicked.connect(self._on_import_clicked)
        self.convert_button = QPushButton("Convert a Hugging Face model…")
        self.convert_button.clicked.connect(self._on_convert_clicked)
        store_row = QHBoxLayout()
        store_row.addWidget(self.import_button)
        store_row.addWidget(self.convert_button)
        store_row.addStretch(1)
        store_row.addWidget(self.delete_button)

        note = QLabel(
            "Pre-converted OpenVINO models. Sizes are approximate; downloads check the exact "
            "sizes and hashes. A cancelled download continues where it stopped."
        )
        note.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addWidget(note)
        layout.addWidget(self.catalog_view, 3)
        layout.addLayout(job_row)
        layout.addWidget(self.progress_label)
        layout.addWidget(self.installed_view, 2)
        layout.addLayout(store_row)
        self._sync_buttons()

    def _tree(self, headers: list[str]) -> QTreeWidget:
        view = QTreeWidget()
        view.setHeaderLabels(headers)
        view.setRootIsDecorated(False)
        view.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        view.itemSelectionChanged.connect(self._sync_buttons)
        return view

    def _fill_catalog(self) -> None:
        selected = self.selected_entry_id()
        self.catalog_view.clear()
        recommended = self.catalog.recommend(self.machine) if self.machine else None
        fits: dict[str, Fit] = (
            {f.entry.id: f for f in self.catalog.assess_all(self.machine)} if self.machine else {}
        )
        for entry in self.catalog.entries:
            fit = fits.get(entry.id)
            mark = _FIT_MARKS[fit.status] if fit else "…"
            if recommended is not None and entry.id == recommended.id:
                mark += " (recommended)"
            item = QTreeWidgetItem(
                [
                    f"{entry.name} ({entry.weights})",
                    f"{entry.download_gb:.2f} GB",
                    f"{entry.memory_gb:g} GB",
                    mark,
                    self._entry_status(entry.id),
                ]
            )
            item.setData(0, Qt.ItemDataRole.UserRole, entry.id)
            item.setToolTip(0, f"{entry.summary}\n{entry.repo} · {', '.join(entry.devices)}")
            if fit is not None:
                item.setToolTip(3, fit.reason)
            self.catalog_view.addTopLevelItem(item)
            if entry.id == selected:
                item.setSelected(True)
        for column in range(1, 5):
            self.catalog_view.resizeColumnToContents(column)

    def _entry_status(self, entry_id: str) -> str:
        if entry_id in self._installed:
            return "Installed"
        if self.controller.store.has_partial(entry_id):
            return "Partly downloaded"
        return ""

    def _fill_installed(self) -> None:
        self.installed_view.clear()
        installed = self.controller.store.list()
        self._installed = {model.id for model in installed}
        for model in installed:
            m = model.manifest
            item = QTreeWidgetItem(
                [m.id, m.format, m.weights or "?", format_bytes(m.size_bytes), ", ".join(m.devices)]
            )
            item.setData(0, Qt.ItemDataRole.UserRole, m.id)
            self.installed_view.addTopLevelItem(item)
        self._fill_catalog()
        self._sync_buttons()

    def _on_machine(self, future: Future[MachineInfo]) -> None:
        try:
            self.machine = future.result()
        except Exception:
            logger.exception("cannot tell what fits this machine")
            return
        self._fill_catalog()

    # ---- selection ---------------------------------------------------------------------

    def selected_entry_id(self) -> str | None:
        return _selected_id(self.catalog_view)

    def selected_installed_id(self) -> str | None:
        return _selected_id(self.installed_view)

    def select_entry(self, entry_id: str) -> None:
        for index in range(self.catalog_view.topLevelItemCount()):
            item = self.catalog_view.topLevelItem(index)
            if item is not None:
                item.setSelected(item.data(0, Qt.ItemDataRole.UserRole) == entry_id)

    def _sync_buttons(self) -> None:
        busy = self._job_kind is not None
        entry_id = self.selected_entry_id()
        status = self._entry_status(entry_id) if entry_id else ""
        self.download_button.setText("Resume" if status == "Partly downloaded" else "Download")
        self.download_button.setEnabled(not busy and entry_id is not None and status != "Installed")
        self.cancel_button.setEnabled(busy)
        self.delete_button.setEnabled(not busy and self.selected_installed_id() is not None)
        self.import_button.setEnabled(not busy)
        self.convert_button.setEnabled(not busy)

    # ---- jobs --------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._job_kind is not None

    def download(self, entry_id: str) -> None:
        """Download (or resume) the catalog entry ``entry_id``."""
        from engine.store.download import PullRequest, pull

        entry = self.catalog.find(entry_id)
        if entry is None:
            raise LookupError(entry_id)
        request = PullRequest(repo=entry.repo, catalog=entry)
        store, endpoint, token = (
            self.controller.store,
            self.hub_endpoint,
            self.controller.settings.hf_token,
        )
        self._run_job(
            "download",
            entry.name,
            lambda cancel, progress: pull(
                store, request, endpoint=endpoint, token=token, progress=progress, cancel=cancel
            ),
        )

    def import_gguf_file(self, path: Path) -> None:
        """Add a local ``.gguf`` file to the store."""
        from engine.store.gguf_import import import_gguf

        store = self.controller.store
        self._run_job(
            "import",
            path.name,
            lambda cancel, progress: import_gguf(store, path, progress=progress, cancel=cancel),
        )

    def convert_model(self, source: str) -> None:
        """Convert a hub repo (``org/name``) or a local transformers folder to int4 IR."""
        from engine.store.convert import ConvertRequest, convert

        store, settings = self.controller.store, self.controller.settings
        request = ConvertRequest(source=source)
        endpoint = self.hub_endpoint
        self._run_job(
            "convert",
            source,
            lambda cancel, progress: convert(
                store,
                request,
                python=settings.convert_python,
                endpoint=endpoint,
                token=settings.hf_token,
                progress=progress,
                cancel=cancel,
            ),
        )

    def delete_model(self, model_id: str) -> None:
        """Delete a stored model (not the one being served)."""
        if model_id == self.controller.active_model_id:
            self._say(f"{model_id} is in use: switch to another model first, then delete it.")
            return
        store = self.controller.store
        self._run_job("delete", model_id, lambda cancel, progress: store.remove(model_id))

    def cancel_job(self) -> None:
        if self._cancel is not None:
            self._cancel.set()
            self._say("Cancelling…")

    def _run_job(
        self,
        kind: str,
        title: str,
        job: Callable[[threading.Event, Callable[[Progress], None]], StoredModel | None],
    ) -> None:
        if self.busy:
            self._say("Another job is running; wait for it or cancel it.")
            return
        cancel = threading.Event()
        self._cancel, self._job_kind = cancel, kind
        self.progress_bar.setRange(0, 0)  # busy until the first report
        self._say(f"{kind.capitalize()} {title}…")
        self._sync_buttons()

        def report(progress: Progress) -> None:  # job thread
            self.tasks.run_on_main(lambda: self._show_progress(progress))

        self.tasks.run_in_background(
            lambda: job(cancel, report), lambda future: self._job_done(kind, title, future)
        )

    def _show_progress(self, progress: Progress) -> None:
        if self._job_kind is None:
            return
        self.last_progress = progress
        if progress.total:
            self.progress_bar.setRange(0, 1000)
            self.progress_bar.setValue(int(1000 * (progress.fraction or 0)))
        self._say(describe_progress(progress))

    def _job_done(self, kind: str, title: str, future: Future[StoredModel | None]) -> None:
        self._cancel, self._job_kind = None, None
        self.progress_bar.setRange(0, 1000)
        outcome: object
        try:
            stored = future.result()
        except Cancelled:
            outcome = "cancelled"
            self.progress_bar.setValue(0)
            resume = " Download again to resume." if kind == "download" else ""
            self._say(f"{title}: cancelled.{resume}")
        except (StoreError, ModelError, OSError) as exc:
            outcome = str(exc)
            self.progress_bar.setValue(0)
            self._say(f"{title}: {exc}")
            self.controller.notify.emit(f"{kind.capitalize()} failed", str(exc), True)
        except Exception as exc:
            logger.exception("%s of %s failed", kind, title)
            outcome = str(exc)
            self._say(f"{title}: unexpected error: {exc}")
            self.controller.notify.emit(f"{kind.capitalize()} failed", str(exc), True)
        else:
            outcome = stored
            self.progress_bar.setValue(1000 if stored is not None else 0)
            if stored is not None:
                size = format_bytes(stored.manifest.size_bytes)
                self._say(f"Added {stored.id} ({size}). Pick it from the tray's Models menu.")
                self.controller.notify.emit("Model ready", f"{stored.id} was added", False)
            else:
                self._say(f"Deleted {title}.")
        self.controller.refresh_models()
        self._fill_installed()
        self.job_finished.emit(kind, outcome)

    def _say(self, text: str) -> None:
        self.progress_label.setText(text)

    # ---- buttons -----------------------------------------------------------------------

    def _on_download_clicked(self) -> None:
        entry_id = self.selected_entry_id()
        if entry_id:
            self.download(entry_id)

    def _on_delete_clicked(self) -> None:
        model_id = self.selected_installed_id()
        if not model_id:
            return
        answer = QMessageBox.question(
            self, "Delete model", f"Delete {model_id} and its files from this computer?"
        )
        if answer == QMessageBox.StandardButton.Yes:
            self.delete_model(model_id)

    def _on_import_clicked(self) -> None:
        file, _ = QFileDialog.getOpenFileName(
            self, "Import a GGUF model", str(Path.home()), "GGUF models (*.gguf)"
        )
        if file:
            self.import_gguf_file(Path(file))

    def _on_convert_clicked(self) -> None:
        source, ok = QInputDialog.getText(
            self,
            "Convert a model",
            "Hugging Face repo (org/name) or a local transformers model folder.\n"
            "It is converted to OpenVINO with int4 weights; this takes a while and needs "
            "memory about twice the model's size.",
        )
        if ok and source.strip():
            self.convert_model(source.strip())
