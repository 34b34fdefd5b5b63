"""``HubSearch``: the model manager's search box over the hub's OpenVINO models and GGUF repos.

Typing waits for a pause (:data:`DEBOUNCE_MS`), then :func:`engine.store.search.search_hub`
runs on the task manager's pool while the line under the box says "Searching…". Selecting a
result lists its files in the background to size it and judge it against this machine (as
the catalog does); a GGUF repo's files are offered in a picker (Q4_K_M first). *Download*
emits ``download_requested(SizedResult)``; the model manager runs it as one of its jobs.
A failure (hub unreachable, a repo without a loadable model) is one line under the box; the
catalog tab keeps working. A hub mirror without search says so, and opens a repository id
(owner/name) typed in the box directly. Answers to an older query or selection are dropped.

Threading: GUI thread only; the network calls run on the task manager's pool.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from desktop.jobs import Job
from desktop.store_text import human_size
from desktop.taskman import TaskManager
from desktop.views.installed_models import find_item, selected_id, tree_widget
from engine.store.catalog import MachineInfo
from engine.store.search import (
    HubModel,
    SizedResult,
    choose_gguf,
    judge,
    search_hub,
    size_result,
)

logger = logging.getLogger(__name__)

DEBOUNCE_MS = 400
SEARCHING = "Searching…"
PLACEHOLDER = "Search the hub for OpenVINO models and GGUF repos (e.g. qwen)"
DIRECT = "This hub mirror does not offer search; {repo} opened by its id."
FIT_MARKS = {
    "fits": "✓ fits",
    "tight": "⚠ tight",
    "too-big": "✗ too big",
    "no-device": "✗ no device",
}
_KIND_LABELS = {"openvino": "OpenVINO", "gguf": "GGUF"}
_SIZE, _FIT = 3, 4


class HubSearch(QWidget):
    """Search box, results and the chosen result's download (see the module docstring)."""

    download_requested = Signal(object)  # SizedResult
    searched = Signal()  # a search's answer (results or an error) is shown
    sized = Signal()  # the selected result's size and fit are shown

    def __init__(
        self,
        tasks: TaskManager,
        *,
        endpoint: str | None,
        token: str | None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.tasks = tasks
        self.endpoint = endpoint
        self.token = token
        self.machine: MachineInfo | None = None
        self.results: list[HubModel] = []
        self.current: SizedResult | None = None
        self.busy = False
        self._query_serial = 0
        self._size_serial = 0
        self.box = QLineEdit()
        self.box.setPlaceholderText(PLACEHOLDER)
        self.box.setClearButtonEnabled(True)
        self.box.textChanged.connect(self._on_text)
        self.box.returnPressed.connect(self.search_now)
        self.debounce = QTimer(self)
        self.debounce.setSingleShot(True)
        self.debounce.setInterval(DEBOUNCE_MS)
        self.debounce.timeout.connect(self.search_now)
        self.status = QLabel(" ")
        self.status.setWordWrap(True)  # a long repo name must not widen the window
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.view = tree_widget(
            ["Repo", "Kind", "Downloads", "Download", "This machine"], stretch=0
        )
        self.view.itemSelectionChanged.connect(self._on_selected)
        self.file_picker = QComboBox()
        self.file_picker.setToolTip("The GGUF file to download (Q4_K_M is the usual choice)")
        self.file_picker.currentIndexChanged.connect(self._on_file_chosen)
        self.file_picker.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.file_picker.setMinimumContentsLength(30)
        self.file_picker.hide()
        self.download_button = QPushButton("Download")
        self.download_button.clicked.connect(self._on_download)
        row = QHBoxLayout()
        row.addWidget(self.status, 1)
        row.addWidget(self.file_picker)
        row.addWidget(self.download_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.box)
        layout.addWidget(self.view, 1)
        layout.addLayout(row)
        self._sync()

    # ---- searching ---------------------------------------------------------------------

    def _on_text(self, text: str) -> None:
        self.debounce.start()  # restarts: one search per pause in typing

    def search_now(self) -> None:
        self.debounce.stop()
        query = self.box.text().strip()
        self._query_serial += 1
        serial = self._query_serial
        if not query:
            self._show_results([], "")
            return
        self._say(SEARCHING)
        endpoint, token = self.endpoint, self.token
        Job(
            self.tasks,
            lambda: search_hub(query, endpoint=endpoint, token=token),
            what=f"search the hub for {query!r}",
            success=lambda found: self._on_searched(serial, query, found),
            failure=lambda exc: self._search_failed(serial, query, exc),
            expected=(Exception,),  # any failure is one line under the box
        ).run()

    def _search_failed(self, serial: int, query: str, exc: Exception) -> None:
        if serial != self._query_serial:
            return  # the person typed on
        logger.warning("hub search for %r failed: %s", query, exc)
        self._show_results([], _sentence(str(exc)), error=True)

    def _on_searched(self, serial: int, query: str, found: list[HubModel]) -> None:
        if serial != self._query_serial:
            return  # the person typed on
        if len(found) == 1 and found[0].direct:  # a hub without search, opened by id
            self._show_results(found, DIRECT.format(repo=found[0].repo))
            self.select(found[0].repo)
            return
        count = len(found)
        plural = "" if count == 1 else "s"
        summary = f"{count} model{plural} for “{query}”." if found else f"Nothing for “{query}”."
        self._show_results(found, summary)

    def _show_results(self, found: list[HubModel], summary: str, *, error: bool = False) -> None:
        self.results = found
        self.current = None
        self.view.clear()
        for model in found:
            item = QTreeWidgetItem(
                [model.repo, _KIND_LABELS[model.kind], f"{model.downloads:,}", "", ""]
            )
            item.setData(0, Qt.ItemDataRole.UserRole, model.repo)
            item.setToolTip(0, model.pipeline_tag or "")
            self.view.addTopLevelItem(item)
        for column in range(1, 5):
            self.view.resizeColumnToContents(column)
        self._say(summary, error=error)
        self._sync()
        self.searched.emit()

    # ---- a selected result -------------------------------------------------------------

    def select(self, repo: str) -> None:
        item = find_item(self.view, repo)
        if item is not None:
            self.view.setCurrentItem(item)

    def _on_selected(self) -> None:
        repo = selected_id(self.view)
        model = next((m for m in self.results if m.repo == repo), None)
        self.current = None
        self._sync()
        if model is None:
            return
        self._size_serial += 1
        serial = self._size_serial
        self._say(f"Checking the size of {model.repo}…")
        endpoint, token, machine = self.endpoint, self.token, self.machine
        Job(
            self.tasks,
            lambda: size_result(model, machine, endpoint=endpoint, token=token),
            what=f"size {model.repo}",
            success=lambda sized: self._on_sized(serial, sized),
            failure=lambda exc: self._size_failed(serial, model, exc),
            expected=(Exception,),  # any failure is one line under the box
        ).run()

    def _size_failed(self, serial: int, model: HubModel, exc: Exception) -> None:
        if serial != self._size_serial:
            return  # another result was selected meanwhile
        logger.warning("cannot size %s: %s", model.repo, exc)
        self._say(_sentence(str(exc)), error=True)
        self.sized.emit()

    def _on_sized(self, serial: int, sized: SizedResult) -> None:
        if serial != self._size_serial:
            return
        self.file_picker.blockSignals(True)
        self.file_picker.clear()
        for remote in sized.choices:
            self.file_picker.addItem(f"{remote.path} ({human_size(remote.size)})", remote.path)
        self.file_picker.setCurrentIndex(self.file_picker.findData(sized.gguf_file))
        self.file_picker.blockSignals(False)
        self._show_sized(sized)

    def _on_file_chosen(self) -> None:
        filename = self.file_picker.currentData()
        if self.current is not None and filename:
            self._show_sized(choose_gguf(self.current, str(filename), self.machine))

    def _show_sized(self, sized: SizedResult) -> None:
        self.current = sized
        item = find_item(self.view, sized.model.repo)
        mark = FIT_MARKS[sized.status] if sized.status else "…"
        if item is not None:
            item.setText(_SIZE, human_size(sized.download_bytes))
            item.setText(_FIT, mark)
            item.setToolTip(_FIT, sized.reason)
            for column in (_SIZE, _FIT):
                self.view.resizeColumnToContents(column)
        what = sized.gguf_file or "the whole repo"
        self._say(
            f"{sized.model.repo}: {what}, {human_size(sized.download_bytes)}; {sized.reason}."
        )
        self._sync()
        self.sized.emit()

    # ---- state -------------------------------------------------------------------------

    def set_machine(self, machine: MachineInfo) -> None:
        self.machine = machine
        if self.current is not None:
            name = self.current.gguf_file
            sized = self.current
            self._show_sized(
                choose_gguf(sized, name, machine) if name else _rejudge(sized, machine)
            )

    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        self._sync()

    def _sync(self) -> None:
        sized = self.current
        self.file_picker.setVisible(sized is not None and bool(sized.choices))
        self.download_button.setEnabled(
            not self.busy and sized is not None and sized.status not in ("too-big", "no-device")
        )
        if sized is not None and sized.status in ("too-big", "no-device"):
            self.download_button.setToolTip(f"Not on this machine: {sized.reason}.")
        else:
            self.download_button.setToolTip("Download the selected model into Sidelight")

    def _say(self, text: str, *, error: bool = False) -> None:
        self.status.setProperty("role", "error" if error else None)
        self.status.style().unpolish(self.status)
        self.status.style().polish(self.status)
        self.status.setText(text or " ")

    def _on_download(self) -> None:
        if self.current is not None:
            self.download_requested.emit(self.current)


def _rejudge(sized: SizedResult, machine: MachineInfo) -> SizedResult:
    return judge(sized.model, sized.files, sized.choices, machine)


def _sentence(text: str) -> str:
    text = text.strip()
    return f"{text[:1].upper()}{text[1:]}{'' if text.endswith('.') else '.'}"
