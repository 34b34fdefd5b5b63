"""``ModelManager``: the catalog (with what fits this machine), downloads, imports, deletes,
and the installed models with the one in use marked and *Use* to switch.

Every store job (download, conversion, GGUF import, delete) runs on the task manager's pool
as a :class:`~desktop.jobs.Job`; progress reports arrive on that thread and hop to the GUI
thread (through the job) before touching a widget: the bar, the line under it and the
catalog's status column.
One job runs at a time; Cancel sets its event and the job stops at its next chunk, keeping a
download's partial files so the next Download resumes. The store's messages are shown in GUI
words (:mod:`desktop.store_text`).

Threading: GUI thread only.
"""

from __future__ import annotations

import dataclasses
import html
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QTabWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from desktop import convert_setup
from desktop.controller import Controller
from desktop.jobs import Job, unexpected_text
from desktop.store_text import (
    describe_progress,
    gui_message,
    human_size,
    progress_figures,
    tools_missing,
)
from desktop.taskman import TaskManager
from desktop.views.convert_dialog import ConvertDialog
from desktop.views.convert_tools import ConvertTools
from desktop.views.hub_search import HubSearch
from desktop.views.installed_models import (
    InstalledModels,
    find_item,
    select_item,
    selected_id,
    tree_widget,
)
from desktop.views.model_settings import ModelSettingsDialog
from desktop.views.screen import fit_to_screen
from engine.models import GENERATIVE_TASKS, ModelError
from engine.settings import SettingsError, save_config
from engine.store import StoredModel, StoreError
from engine.store.catalog import Catalog, CatalogEntry, Fit, MachineInfo
from engine.store.convert import ConvertRequest, ConvertToolsMissing, check_tools
from engine.store.errors import Cancelled
from engine.store.progress import Progress
from engine.store.search import SizedResult

logger = logging.getLogger(__name__)

_FIT_MARKS = {
    "fits": "✓ fits",
    "tight": "⚠ tight",
    "too-big": "✗ too big",
    "no-device": "✗ no device",
}

JobKind = Literal["download", "import", "convert", "delete"]
_DOING: dict[JobKind, str] = {
    "download": "Downloading",
    "import": "Importing",
    "convert": "Converting",
    "delete": "Deleting",
}
# A job's ordinary failures: their words are the message (anything else is a bug).
_JOB_ERRORS: tuple[type[Exception], ...] = (StoreError, ModelError, OSError)
_STATUS_COLUMN = 4
CHECKING_TOOLS = "Checking whether this computer has the conversion tools…"


class ModelManager(QDialog):
    """The "Download models…" dialog. ``job_finished(kind, outcome)`` reports each job's
    end: ``outcome`` is the StoredModel (``None`` for a delete), ``"cancelled"`` or the
    message the dialog shows."""

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
        self.convert_dialog: ConvertDialog | None = None
        self.settings_dialog: ModelSettingsDialog | None = None
        # Why conversion cannot run here, or None once the tools were found.
        self.convert_problem: str | None = CHECKING_TOOLS
        self._cancel: threading.Event | None = None
        self._job_kind: JobKind | None = None
        self._job_entry: str | None = None  # the catalog entry being downloaded
        self._installed: set[str] = set()  # ids in the store, as of the last _fill_installed
        self.setWindowTitle("Models")  # Qt adds " — Sidelight"
        self._build()
        fit_to_screen(self, QSize(900, 600))
        controller.models_changed.connect(self._fill_installed)
        self._fill_installed()  # fills the catalog too
        if machine is None:
            Job(
                self.tasks,
                MachineInfo.detect,
                what="tell what fits this machine",
                success=self._on_machine,
                expected=(),  # any failure is logged; the catalog stays without fit marks
            ).run()
        self.check_tools()

    def check_tools(self) -> None:
        """Ask (off the GUI thread) whether conversion can run: with the ``convert_python``
        setting, else the app's own conversion environment once it exists (installed from
        here, or by hand with the commands a failed installation gives), else this Python."""
        settings = self.controller.settings
        env_python = convert_setup.env_python(self.tools.env)
        python = settings.convert_python or (env_python if env_python.exists() else None)

        def found(_: None) -> None:
            if python is not None and settings.convert_python is None:
                self._use_convert_python(python)
            self._on_tools_checked(None)

        Job(
            self.tasks,
            lambda: check_tools(python),
            what="tell whether the conversion tools are installed",
            success=found,
            failure=self._on_tools_checked,
            expected=(ConvertToolsMissing,),
        ).run()

    def _use_convert_python(self, python: Path) -> None:
        """Remember ``python`` as the conversion interpreter (the settings file) and use it."""
        try:
            save_config(self.controller.settings.paths, {"convert_python": str(python)})
        except (OSError, SettingsError) as exc:
            logger.warning("cannot save convert_python: %s", exc)
        self.controller.apply_settings(
            dataclasses.replace(self.controller.settings, convert_python=python)
        )

    def _on_tools_installed(self, python: Path) -> None:
        self.convert_problem = CHECKING_TOOLS
        self._sync_buttons()
        self.check_tools()

    # ---- layout ------------------------------------------------------------------------

    def _build(self) -> None:
        # The status column stretches: it carries a download's figures.
        self.catalog_view = tree_widget(
            ["Model", "Download", "Memory", "This machine", "Status"], stretch=_STATUS_COLUMN
        )
        self.catalog_view.itemSelectionChanged.connect(self._sync_buttons)
        self.download_button = QPushButton("Download")
        self.download_button.clicked.connect(self._on_download_clicked)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel_job)
        self.progress_bar = QProgressBar()
        self.progress_bar.setRange(0, 1000)
        self.progress_bar.setTextVisible(True)
        self.progress_label = QLabel(" ")
        self.progress_label.setWordWrap(True)
        self.progress_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        job_row = QHBoxLayout()
        job_row.addWidget(self.progress_bar, 1)
        job_row.addWidget(self.download_button)
        job_row.addWidget(self.cancel_button)

        self.installed = InstalledModels(self.controller)
        self.installed.delete_requested.connect(self.delete_model)
        self.installed.settings_requested.connect(self.open_model_settings)
        self.import_button = QPushButton("Import GGUF…")
        self.import_button.clicked.connect(self._on_import_clicked)
        self.convert_button = QPushButton("Convert a Hugging Face model…")
        self.convert_button.clicked.connect(self._on_convert_clicked)
        self.installed.button_row.insertWidget(0, self.import_button)
        self.installed.button_row.insertWidget(1, self.convert_button)
        self.tools = ConvertTools(self.tasks, convert_setup.env_dir(self.controller.settings.paths))
        self.tools.installed.connect(self._on_tools_installed)

        untried = sum(1 for e in self.catalog.entries if not e.verified)
        note = QLabel(
            "Pre-converted OpenVINO models, and a few to convert from the hub. Sizes are "
            "approximate; downloads check the exact sizes and hashes. A cancelled download "
            "continues where it stopped."
            + (
                f" {untried} of {len(self.catalog.entries)} were never downloaded and served "
                "where the catalog was written (hover a model for why)."
                if untried
                else ""
            )
        )
        note.setWordWrap(True)
        catalog_page = QWidget()
        catalog_layout = QVBoxLayout(catalog_page)
        catalog_layout.addWidget(note)
        catalog_layout.addWidget(self.catalog_view, 1)
        self.search = HubSearch(
            self.tasks, endpoint=self.hub_endpoint, token=self.controller.settings.hf_token
        )
        self.search.download_requested.connect(self.download_result)
        self.tabs = QTabWidget()
        self.tabs.addTab(catalog_page, "Catalog")
        self.tabs.addTab(self.search, "Search the hub")
        self.tabs.currentChanged.connect(lambda _index: self._sync_buttons())
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs, 3)
        layout.addLayout(job_row)
        layout.addWidget(self.progress_label)
        layout.addWidget(self.installed, 2)
        layout.addWidget(self.tools)
        self._sync_buttons()

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
            if fit is not None and fit.usable and entry.devices[0] not in fit.devices:
                # An NPU build on a machine without one: it runs, but not where it is fast.
                mark += f" on {fit.devices[0]} (made for {entry.devices[0]})"
            if recommended is not None and entry.id == recommended.id:
                mark += " (recommended)"
            item = QTreeWidgetItem(
                [
                    f"{entry.name} ({entry.weights})",
                    human_size(entry.download_gb * 1000**3),
                    f"{entry.memory_gb:g} GB",
                    mark,
                    self._entry_status(entry.id),
                ]
            )
            item.setData(0, Qt.ItemDataRole.UserRole, entry.id)
            item.setToolTip(0, _entry_tooltip(entry))
            if fit is not None:
                item.setToolTip(3, fit.reason)
            self.catalog_view.addTopLevelItem(item)
            if entry.id == selected:
                item.setSelected(True)
        for column in range(_STATUS_COLUMN):
            self.catalog_view.resizeColumnToContents(column)

    def _entry_status(self, entry_id: str) -> str:
        if entry_id == self._job_entry and self._job_kind is not None:
            progress = self.last_progress
            if progress is not None and progress.phase == "verifying":
                return "Checking the files…"
            figures = progress_figures(progress) if progress is not None else ""
            return figures or "Starting…"
        if entry_id in self._installed:
            return "Installed"
        if self.controller.store.has_partial(entry_id):
            return "Partly downloaded"
        entry = self.catalog.find(entry_id)
        if entry is not None and entry.needs_conversion:
            return "Needs conversion"
        return ""

    def _show_entry_status(self, entry_id: str) -> None:
        item = find_item(self.catalog_view, entry_id)
        if item is not None:
            item.setText(_STATUS_COLUMN, self._entry_status(entry_id))

    def _fill_installed(self) -> None:
        installed = self.controller.store.list()
        self._installed = {model.id for model in installed}
        self.installed.fill(installed)
        self._fill_catalog()
        self._sync_buttons()

    def _on_machine(self, machine: MachineInfo) -> None:
        self.machine = machine
        self.search.set_machine(self.machine)
        self._fill_catalog()

    def _on_tools_checked(self, exc: Exception | None) -> None:
        """The tool check ended: ``exc`` is ``None`` when the tools were found."""
        if exc is None:
            self.convert_problem = None
        elif isinstance(exc, ConvertToolsMissing):
            self.convert_problem = (
                tools_missing(exc.missing, self.controller.settings.paths.config_file)
                if exc.missing
                else f"Conversion is not available here. {self._words(exc)}"
            )
        else:  # logged with its traceback by the job
            self.convert_problem = f"Conversion is not available here: {exc}"
        self._sync_buttons()

    # ---- selection ---------------------------------------------------------------------

    def selected_entry_id(self) -> str | None:
        return selected_id(self.catalog_view)

    def select_entry(self, entry_id: str) -> None:
        select_item(self.catalog_view, entry_id)

    def _sync_buttons(self) -> None:
        busy = self._job_kind is not None
        entry_id = self.selected_entry_id()
        status = self._entry_status(entry_id) if entry_id else ""
        converts = status == "Needs conversion"
        self.download_button.setText(
            "Convert" if converts else "Resume" if status == "Partly downloaded" else "Download"
        )
        self.download_button.setEnabled(
            not busy
            and entry_id is not None
            and status != "Installed"
            and not (converts and self.convert_problem is not None)
            and self.tabs.currentIndex() == 0
        )
        self.download_button.setToolTip(
            _rich(self.convert_problem) if converts and self.convert_problem else ""
        )
        self.search.set_busy(busy)
        # The search tab has its own Download beside its file picker.
        self.download_button.setVisible(self.tabs.currentIndex() == 0)
        self.cancel_button.setEnabled(busy)
        self.installed.set_busy(busy)
        self.import_button.setEnabled(not busy)
        self.convert_button.setEnabled(not busy and self.convert_problem is None)
        self.convert_button.setToolTip(
            _rich(self.convert_problem)
            if self.convert_problem
            else "Convert a model from the hub or from a folder to OpenVINO."
        )
        # Said in words under the list, not only in the disabled button's tooltip.
        problem = self.convert_problem
        checking = problem == CHECKING_TOOLS
        self.tools.show_problem(None if checking else problem, installable=not checking)

    # ---- jobs --------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._job_kind is not None

    def download(self, entry_id: str) -> None:
        """Download (or resume) the catalog entry ``entry_id``; convert it when the catalog
        has no pre-converted build of it."""
        from engine.store.download import PullRequest, pull

        entry = self.catalog.find(entry_id)
        if entry is None:
            raise LookupError(entry_id)
        if entry.needs_conversion:
            self.convert_model(
                ConvertRequest(
                    source=entry.repo,
                    weights=entry.weights,
                    npu=entry.devices[0] == "NPU",
                    model_id=entry.id,
                )
            )
            return
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
            entry_id=entry.id,
        )

    def download_result(self, sized: SizedResult) -> None:
        """Download a hub search result: an OpenVINO repo whole, a GGUF repo's chosen file."""
        from engine.store.download import PullRequest, pull, pull_gguf

        store, endpoint, token = (
            self.controller.store,
            self.hub_endpoint,
            self.controller.settings.hf_token,
        )
        repo, filename = sized.model.repo, sized.gguf_file
        if filename is None:
            request = PullRequest(repo=repo)
            self._run_job(
                "download",
                repo,
                lambda cancel, progress: pull(
                    store, request, endpoint=endpoint, token=token, progress=progress, cancel=cancel
                ),
            )
            return
        gguf = filename
        self._run_job(
            "download",
            f"{repo} ({gguf})",
            lambda cancel, progress: pull_gguf(
                store, repo, gguf, endpoint=endpoint, token=token, progress=progress, cancel=cancel
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

    def convert_model(self, request: ConvertRequest) -> None:
        """Convert a hub repo (``org/name``) or a local transformers folder to OpenVINO IR."""
        from engine.store.convert import convert

        store, settings = self.controller.store, self.controller.settings
        endpoint = self.hub_endpoint
        self._run_job(
            "convert",
            request.source,
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
        """Delete a stored model (never the one being served: *Delete* is off for it)."""
        refusal = self.installed.delete_refusal(model_id)
        if refusal is not None:
            self._say(refusal)
            return
        store = self.controller.store
        self._run_job("delete", model_id, lambda cancel, progress: store.remove(model_id))

    def cancel_job(self) -> None:
        if self._cancel is not None:
            self._cancel.set()
            self._say("Cancelling…")

    def _run_job(
        self,
        kind: JobKind,
        title: str,
        job: Callable[[threading.Event, Callable[[Progress], None]], StoredModel | None],
        *,
        entry_id: str | None = None,
    ) -> None:
        if self.busy:
            self._say("Another job is running; wait for it or cancel it.")
            return
        cancel = threading.Event()
        self._cancel, self._job_kind, self._job_entry = cancel, kind, entry_id
        self.last_progress = None
        self.progress_bar.setRange(0, 0)  # busy until the first report with a total
        self._say(f"{_DOING[kind]} {title}…")
        if entry_id is not None:
            self._show_entry_status(entry_id)
        self._sync_buttons()

        Job.with_progress(
            self.tasks,
            lambda report: job(cancel, report),  # the job's thread: no widgets there
            self._show_progress,
            what=f"{kind} {title}",
            success=lambda stored: self._job_done(kind, title, stored),
            failure=lambda exc: self._job_failed(kind, title, exc),
            expected=(Cancelled, *_JOB_ERRORS),
        ).run()

    def _show_progress(self, progress: Progress) -> None:
        if self._job_kind is None:
            return  # a report that was queued before the job ended
        self.last_progress = progress
        if progress.total:
            self.progress_bar.setRange(0, 1000)
            self.progress_bar.setValue(int(1000 * (progress.fraction or 0)))
        self._say(describe_progress(progress, self._job_kind))
        if self._job_entry is not None:
            self._show_entry_status(self._job_entry)

    def _end_job(self) -> bool:
        """Clear the running job's state; whether it came from the catalog tab."""
        from_catalog = self._job_entry is not None
        self._cancel, self._job_kind, self._job_entry = None, None, None
        self.progress_bar.setRange(0, 1000)
        return from_catalog

    def _job_done(self, kind: JobKind, title: str, stored: StoredModel | None) -> None:
        self._end_job()
        self.progress_bar.setValue(1000 if stored is not None else 0)
        if stored is not None:
            self._say(self._added(stored))
            self.controller.notify.emit("Model ready", f"{stored.id} was added", False)
        else:
            self._say(f"Deleted {title}.")
        self._after_job(kind, stored)

    def _job_failed(self, kind: JobKind, title: str, exc: Exception) -> None:
        from_catalog = self._end_job()
        self.progress_bar.reset()  # empty, no "0%"
        if isinstance(exc, Cancelled):
            button = "Resume" if from_catalog else "Download"
            resume = f" Click {button} to continue where it stopped." if kind == "download" else ""
            self._say(f"The {kind} of {title} was cancelled.{resume}")
            self._after_job(kind, "cancelled")
            return
        # An unexpected error was logged with its traceback by the job.
        outcome = self._words(exc) if isinstance(exc, _JOB_ERRORS) else unexpected_text(exc)
        self._say(f"Could not {kind} {title}. {outcome}")
        self.controller.notify.emit(f"{kind.capitalize()} failed", outcome, True)
        self._after_job(kind, outcome)

    def _after_job(self, kind: JobKind, outcome: object) -> None:
        """After any job: show the store as it is now and say how the job ended."""
        self.controller.refresh_models()
        self._fill_installed()
        if isinstance(outcome, StoredModel):
            self.installed.select(outcome.id)
        self.job_finished.emit(kind, outcome)

    def _added(self, stored: StoredModel) -> str:
        added = f"Added {stored.id} ({human_size(stored.manifest.size_bytes)})."
        if stored.manifest.task in GENERATIVE_TASKS:
            return f"{added} Click Use to chat with it."
        return f"{added} Apps can use it through the API."

    def _words(self, exc: BaseException) -> str:
        return gui_message(str(exc), self.controller.settings.paths.config_file)

    def _say(self, text: str) -> None:
        self.progress_label.setText(text)

    # ---- buttons -----------------------------------------------------------------------

    def _on_download_clicked(self) -> None:
        entry_id = self.selected_entry_id()
        if entry_id:
            self.download(entry_id)

    def _on_import_clicked(self) -> None:
        file, _ = QFileDialog.getOpenFileName(
            self, "Import a GGUF model", str(Path.home()), "GGUF models (*.gguf)"
        )
        if file:
            self.import_gguf_file(Path(file))

    def open_model_settings(self, model_id: str) -> ModelSettingsDialog | None:
        """Open the *Settings…* dialog of the stored model ``model_id``."""
        if self.settings_dialog is not None:
            self.settings_dialog.deleteLater()
        try:
            dialog = ModelSettingsDialog(self.controller, model_id, self)
        except StoreError as exc:  # deleted or damaged since the list was filled
            self._say(self._words(exc))
            self._fill_installed()
            return None
        dialog.saved.connect(
            lambda saved_id, _prefs: self._say(f"Saved the settings of {saved_id}.")
        )
        self.settings_dialog = dialog
        dialog.open()
        return dialog

    def _on_convert_clicked(self) -> None:
        if self.convert_dialog is not None:
            self.convert_dialog.deleteLater()
        dialog = ConvertDialog(self.controller.store, self)
        dialog.accepted.connect(lambda: self.convert_model(dialog.request()))
        self.convert_dialog = dialog
        dialog.open()


def _entry_tooltip(entry: CatalogEntry) -> str:
    """A catalog row's tooltip: what the model is, where it comes from, how sure the figures are."""
    source = f"convert from {entry.repo}" if entry.needs_conversion else entry.repo
    lines = [entry.summary, f"{source} · {', '.join(entry.devices)}"]
    if entry.context_length:
        lines.append(f"context {entry.context_length:,} tokens · licence {entry.licence or '?'}")
    lines += [entry.note, "" if entry.verified else entry.verified_note]
    return "\n".join(line for line in lines if line)


def _rich(text: str) -> str:
    """A tooltip Qt wraps (plain-text tooltips run off the screen)."""
    return f"<p>{html.escape(text, quote=False)}</p>"
