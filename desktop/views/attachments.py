"""Text files and pasted code sent with a message, shown as chips above the message box.

A file is read on the GUI thread (it is small: :data:`MAX_BYTES` at most) and refused with a
clear message when it is binary or too big; its tokens are counted by the engine's count
path (templated and tokenized, nothing generated) on the task manager's loop, and the chip
shows them once counted. The message cannot be sent while a count is still running.

Threading: GUI thread only (counting runs through the task manager).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFileDialog, QFrame, QHBoxLayout, QLabel, QToolButton, QWidget

from desktop.chat import count_text_tokens, error_text
from desktop.controller import Controller
from desktop.history import Attachment
from desktop.taskman import StreamWorker, TaskManager
from desktop.views.transcript import chip_text, size_text

logger = logging.getLogger(__name__)

MAX_BYTES = 256 * 1024


class AttachmentRefused(ValueError):
    """The file cannot be attached; the message says why, for a person."""


def read_text_file(path: Path) -> str:
    """The file's text, or :class:`AttachmentRefused` for a binary or too big file."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise AttachmentRefused(f"{path.name} cannot be read: {exc.strerror}") from exc
    if size > MAX_BYTES:
        raise AttachmentRefused(
            f"{path.name} is {size_text(size)}; files up to {size_text(MAX_BYTES)} can be "
            "attached. Attach a part of it, or paste the part that matters."
        )
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        raise AttachmentRefused(f"{path.name} is not a text file; only text can be attached.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AttachmentRefused(
            f"{path.name} is not UTF-8 text; only text files can be attached."
        ) from exc


class PendingAttachments(QWidget):
    """The chips of the attachments the next message carries, each with a remove button.

    ``refused`` carries the message of a file that could not be attached; ``changed`` fires
    when chips come, go or get their token count.
    """

    refused = Signal(str)
    changed = Signal()

    def __init__(
        self,
        controller: Controller,
        tasks: TaskManager,
        parent: QWidget | None = None,
        *,
        model: Callable[[], str | None] | None = None,
    ) -> None:
        super().__init__(parent)
        self.controller = controller
        # Whose tokenizer counts an attachment: the chat's own model (default: the default).
        self._model = model or (lambda: controller.active_model_id)
        self.tasks = tasks
        self.items: list[Attachment] = []
        self.counting = 0
        self._workers: list[StreamWorker] = []  # kept alive until their count arrives
        self._layout = QHBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.addStretch(1)
        self.setVisible(False)

    def add_file(self, path: Path) -> None:
        try:
            text = read_text_file(path)
        except AttachmentRefused as exc:
            self.refused.emit(str(exc))
            return
        self.add_text(path.name, text)

    def pick_file(self) -> bool:
        """Ask for a file and attach it; False when none was picked."""
        name, _ = QFileDialog.getOpenFileName(self.window(), "Attach a text file — Sidelight")
        if name:
            self.add_file(Path(name))
        return bool(name)

    def paste(self, earlier: int) -> None:
        """The clipboard's text as an attached file (pasted code stays out of the message
        box); ``earlier`` attachments of the chat number it ("pasted-3.txt")."""
        text = QGuiApplication.clipboard().text()
        if text.strip():
            self.add_text(f"pasted-{earlier + len(self.items) + 1}.txt", text)

    def add_text(self, name: str, text: str) -> None:
        """Attach ``text`` (pasted code: ``name`` like "pasted-1.txt")."""
        size = len(text.encode("utf-8"))
        if size > MAX_BYTES:
            self.refused.emit(
                f"{name} is {size_text(size)}; up to {size_text(MAX_BYTES)} can be attached."
            )
            return
        item = Attachment(name=name, size=size, tokens=-1, text=text)
        self.items.append(item)
        self._count(item)
        self._rebuild()

    def set(self, items: list[Attachment]) -> None:
        self.items = list(items)
        self._rebuild()

    def take(self) -> list[Attachment]:
        items, self.items = self.items, []
        self._rebuild()
        return items

    def remove(self, item: Attachment) -> None:
        self.items = [i for i in self.items if i is not item]
        self._rebuild()

    def _count(self, item: Attachment) -> None:
        pipeline, model = self.controller.pipeline, self._model()

        async def count() -> AsyncIterator[int]:
            yield await count_text_tokens(pipeline, model, item["text"])

        def counted(tokens: object) -> None:
            item["tokens"] = int(str(tokens))
            self._rebuild()

        def failed(exc: object) -> None:
            message = error_text(exc) if isinstance(exc, BaseException) else str(exc)
            self.refused.emit(f"{item['name']} could not be counted: {message}")
            self.remove(item)

        def done() -> None:
            self.counting -= 1
            self._workers.remove(worker)
            self.changed.emit()

        worker = self.tasks.stream(count)
        self._workers.append(worker)
        worker.yielded.connect(counted)
        worker.errored.connect(failed)
        worker.done.connect(done)
        self.counting += 1
        worker.start()

    def _rebuild(self) -> None:
        while self._layout.count() > 1:
            taken = self._layout.takeAt(0)
            widget = taken.widget() if taken is not None else None
            if widget is not None:
                widget.deleteLater()
        for position, item in enumerate(self.items):
            self._layout.insertWidget(position, self._chip(item, self.remove))
        self.setVisible(bool(self.items))
        self.changed.emit()

    def _chip(self, item: Attachment, remove: Callable[[Attachment], None]) -> QWidget:
        chip = QFrame()
        chip.setFrameShape(QFrame.Shape.StyledPanel)
        row = QHBoxLayout(chip)
        row.setContentsMargins(6, 2, 2, 2)
        tokens = item["tokens"]
        if tokens < 0:
            label = QLabel(f"Attached: {item['name']} · {size_text(item['size'])} · counting…")
        else:
            label = QLabel(chip_text(item["name"], item["size"], tokens))
        label.setObjectName("attachmentChip")
        close = QToolButton()
        close.setText("\u00d7")  # a multiplication sign: the usual close mark
        close.setToolTip(f"Remove {item['name']}")
        close.setAccessibleName(f"Remove {item['name']}")
        close.clicked.connect(lambda: remove(item))
        row.addWidget(label)
        row.addWidget(close)
        return chip
