"""``ConvertDialog``: what to convert (a hub repo or a local folder) and with which weights.

The source is checked as it is typed (:func:`engine.store.convert.source_problem`, and
whether the result's id is taken), so *Convert* is offered only for a request the store will
start; what only the hub or the converter can tell still comes back from the job.

Threading: GUI thread only.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QButtonGroup,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QGridLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from desktop.store_text import gui_message
from engine.store import ModelStore, StoreError
from engine.store.convert import WEIGHTS, ConvertRequest, source_problem

# (label, weights, npu): int4 first, the default. The NPU recipe is int4, channel-wise.
_WEIGHT_LABELS = {
    "int4": "int4 (smallest, the usual choice)",
    "int8": "int8 (larger, closer to the original)",
    "fp16": "fp16 (full size, for comparison)",
}
WEIGHT_CHOICES: tuple[tuple[str, str, bool], ...] = (
    *((_WEIGHT_LABELS.get(w, w), w, False) for w in WEIGHTS),
    ("NPU (channel-wise int4)", "int4", True),
)


class ConvertDialog(QDialog):
    """Asks for a hub repo id or a model folder and a weights choice; ``request()`` reads them."""

    def __init__(self, store: ModelStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.setWindowTitle("Convert a Hugging Face model")
        self.from_hub = QRadioButton("A model on the Hugging Face hub")
        self.from_folder = QRadioButton("A model folder on this computer")
        self.from_hub.setChecked(True)
        sources = QButtonGroup(self)
        sources.addButton(self.from_hub)
        sources.addButton(self.from_folder)
        self.repo = QLineEdit()
        self.repo.setPlaceholderText("org/name, for example Qwen/Qwen3-0.6B")
        self.folder = QLineEdit()
        self.folder.setPlaceholderText("a folder with config.json and the weights")
        self.browse = QPushButton("Browse…")
        self.weights = QComboBox()
        for label, weights, npu in WEIGHT_CHOICES:
            self.weights.addItem(label, (weights, npu))
        self.problem = QLabel()
        self.problem.setWordWrap(True)
        note = QLabel(
            "The model is converted to OpenVINO on this computer. It takes a while and needs "
            "memory about two and a half times the model's size."
        )
        note.setWordWrap(True)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        self.convert_button = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.convert_button.setText("Convert")

        grid = QGridLayout()
        grid.addWidget(self.from_hub, 0, 0, 1, 2)
        grid.addWidget(self.repo, 1, 0, 1, 2)
        grid.addWidget(self.from_folder, 2, 0, 1, 2)
        grid.addWidget(self.folder, 3, 0)
        grid.addWidget(self.browse, 3, 1)
        grid.addWidget(QLabel("Weights"), 4, 0, 1, 2)
        grid.addWidget(self.weights, 5, 0, 1, 2)
        layout = QVBoxLayout(self)
        layout.addLayout(grid)
        layout.addWidget(note)
        layout.addWidget(self.problem)
        layout.addWidget(self.buttons)

        self.repo.textEdited.connect(lambda _: self.from_hub.setChecked(True))
        self.folder.textEdited.connect(lambda _: self.from_folder.setChecked(True))
        for edit in (self.repo, self.folder):
            edit.textChanged.connect(self._validate)
        sources.buttonToggled.connect(self._validate)
        self.weights.currentIndexChanged.connect(self._validate)
        self.browse.clicked.connect(self._browse)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self._validate()
        self.resize(520, self.sizeHint().height())

    @property
    def source(self) -> str:
        edit = self.repo if self.from_hub.isChecked() else self.folder
        return edit.text().strip()

    def request(self) -> ConvertRequest:
        weights, npu = self.weights.currentData()
        return ConvertRequest(source=self.source, weights=str(weights), npu=bool(npu))

    def _browse(self) -> None:
        start = self.folder.text().strip() or str(Path.home())
        folder = QFileDialog.getExistingDirectory(self, "A model folder with config.json", start)
        if folder:
            self.from_folder.setChecked(True)
            self.folder.setText(folder)

    def _validate(self) -> None:
        problem = None
        if self.source:
            problem = source_problem(self.source)
            if problem is None:
                problem = self._taken(self.request().target_id)
        self.problem.setText(gui_message(problem) if problem else "")
        self.problem.setVisible(problem is not None)
        self.convert_button.setEnabled(bool(self.source) and problem is None)

    def _taken(self, target: str) -> str | None:
        try:
            taken = self.store.contains(target)
        except StoreError as exc:  # a damaged folder holds the id
            return str(exc)
        return f"a model '{target}' is already installed; delete it first" if taken else None
