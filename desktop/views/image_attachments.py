"""Images the next message carries: thumbnail chips above the message box (issue 23).

Images come three ways: *Attach image…* (a file dialog), Ctrl+V of an image on the
clipboard in the message box, and files dropped on the window. Each is checked as the server
would check it (:func:`desktop.chat_images.prepare_image`) and refused with a message naming
it. While the chat's model cannot see images, attaching is greyed out and says why
("<model> cannot see images; models that can: …").

Threading: GUI thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QEvent, QIODevice, QMimeData, QObject, Qt, Signal
from PySide6.QtGui import (
    QAction,
    QDragEnterEvent,
    QDropEvent,
    QGuiApplication,
    QImage,
    QKeyEvent,
    QKeySequence,
    QPixmap,
)
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QWidget,
)

from desktop.chat_images import (
    FILE_FILTER,
    PASTED_NAME,
    ImageRefused,
    PreparedImage,
    cannot_see_text,
    check_room,
    is_image_path,
    load_image,
    prepare_image,
    read_image_file,
    store_image,
)
from desktop.controller import Controller
from desktop.history import ImageRecord
from desktop.views.image_thumbnails import scaled_thumbnail

logger = logging.getLogger(__name__)

CHIP_SIZE = 48  # a chip's thumbnail, longer side


class PendingImages(QWidget):
    """The thumbnail chips of the images the next message carries, each with a remove button.

    ``model`` says which model answers in this chat, ``earlier`` how many images the chat
    already sends (a request carries at most a few). ``refused`` carries the message of an
    image that could not be attached; ``changed`` fires when chips come or go.
    """

    refused = Signal(str)
    changed = Signal()

    def __init__(
        self,
        controller: Controller,
        model: Callable[[], str | None],
        earlier: Callable[[], int],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.controller = controller
        self._model = model
        self._earlier = earlier
        self.items: list[PreparedImage] = []
        self.attach_action = QAction("Attach image…", self)
        self.attach_action.triggered.connect(self.pick_files)
        self.button = QPushButton("Image…")
        self.button.clicked.connect(self.attach_action.trigger)
        self.reason = QLabel()  # why the chips cannot go (the model cannot see)
        self.reason.setObjectName("imageReason")
        self.reason.setWordWrap(True)
        self.reason.hide()
        self._chips = QHBoxLayout()
        self._chips.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addLayout(self._chips)
        row.addWidget(self.reason, 1)
        row.addStretch(0)  # the chips keep their own size at the left
        self._filters: list[_Intake] = []
        controller.models_changed.connect(self.sync)
        controller.status_changed.connect(self.sync)
        self.setVisible(False)
        self.sync()

    # ---- whether the chat's model sees ----------------------------------------------------

    def cannot_see(self) -> str | None:
        """Why images cannot be sent now (None: the chat's model sees)."""
        model = self._model()
        choice = self.controller.choice(model)
        if choice is not None and choice.vision:
            return None
        seeing = [c.id for c in self.controller.models() if c.vision]
        return cannot_see_text(choice.id if choice else model, seeing)

    def sync(self, *_: object) -> None:
        """Grey *Attach image…* out, saying why, while the chat's model cannot see."""
        reason = self.cannot_see()
        self.attach_action.setEnabled(reason is None)
        self.button.setEnabled(reason is None)
        tip = reason or "Attach an image (PNG, JPEG, WebP, GIF); paste one with Ctrl+V or drop it"
        self.attach_action.setToolTip(tip)
        self.button.setToolTip(tip)
        self.reason.setText(f"Not sent: {reason}" if reason else "")
        self.reason.setVisible(bool(reason and self.items))

    # ---- adding ---------------------------------------------------------------------------

    def pick_files(self) -> bool:
        """Ask for image files and attach them; False when none was picked."""
        names, _ = QFileDialog.getOpenFileNames(
            self.window(), "Attach an image — Sidelight", "", FILE_FILTER
        )
        for name in names:
            self.add_file(Path(name))
        return bool(names)

    def add_file(self, path: Path) -> bool:
        return self._add(lambda: read_image_file(path), path.name)

    def add_data(self, data: bytes, name: str) -> bool:
        return self._add(lambda: prepare_image(data, name), name)

    def add_qimage(self, image: QImage, name: str = PASTED_NAME) -> bool:
        """A pasted image (a screenshot) as a PNG."""
        data = QByteArray()
        buffer = QBuffer(data)
        buffer.open(QIODevice.OpenModeFlag.WriteOnly)
        image.save(buffer, "PNG")  # type: ignore[call-overload]  # the stubs want bytes
        buffer.close()
        return self.add_data(bytes(data.data()), name)

    def _add(self, prepare: Callable[[], PreparedImage], name: str) -> bool:
        reason = self.cannot_see()
        try:
            if reason is not None:
                raise ImageRefused(f"{name} is not attached: {reason}")
            check_room(self._earlier(), len(self.items), name)
            image = prepare()
        except ImageRefused as exc:
            logger.info("image refused: %s", exc)
            self.refused.emit(str(exc))
            return False
        self.items.append(image)
        self._rebuild()
        return True

    def paste(self) -> bool:
        """The clipboard's image, if it holds one (and no text): True when it did."""
        mime = QGuiApplication.clipboard().mimeData()
        if mime is None or not _holds_image(mime):
            return False
        image = QGuiApplication.clipboard().image()
        if image.isNull():
            return False
        self.add_qimage(image)
        return True

    def drop(self, mime: QMimeData) -> bool:
        """Dropped image files (or image data): True when any was an image."""
        paths = [Path(url.toLocalFile()) for url in mime.urls() if url.isLocalFile()]
        images = [p for p in paths if is_image_path(p)]
        for path in images:
            self.add_file(path)
        if images:
            return True
        if mime.hasImage():
            data = mime.imageData()
            if isinstance(data, QImage) and not data.isNull():
                self.add_qimage(data, "dropped image")
                return True
        return False

    def install(self, prompt: QPlainTextEdit, window: QWidget) -> None:
        """Ctrl+V in the message box and drops on it (or anywhere in ``window``) attach
        images; everything else (text) goes on as before."""
        window.setAcceptDrops(True)
        for target, keys in ((prompt, True), (prompt.viewport(), False), (window, False)):
            intake = _Intake(self, keys)
            target.installEventFilter(intake)
            self._filters.append(intake)

    # ---- taking and putting back ----------------------------------------------------------

    def take(self, chats: Path, conversation_id: str) -> list[ImageRecord]:
        """Keep the images in the chat's folder and empty the chips; their records."""
        records = [store_image(chats, conversation_id, image) for image in self.items]
        self.clear()
        return records

    def restore(self, records: list[ImageRecord], chats: Path) -> None:
        """A message's images back as chips (an edit, a refused message sent again)."""
        self.items = []
        for record in records:
            try:
                self.items.append(load_image(chats, record))
            except ImageRefused as exc:
                self.refused.emit(str(exc))
        self._rebuild()

    def clear(self) -> None:
        self.items = []
        self._rebuild()

    def remove(self, image: PreparedImage) -> None:
        self.items = [i for i in self.items if i is not image]
        self._rebuild()

    def _rebuild(self) -> None:
        while self._chips.count():
            taken = self._chips.takeAt(0)
            widget = taken.widget() if taken is not None else None
            if widget is not None:
                widget.hide()
                widget.setParent(None)  # out of the panel now (deleted once idle)
                widget.deleteLater()
        for position, image in enumerate(self.items):
            self._chips.insertWidget(position, self._chip(image))
        self.setVisible(bool(self.items))
        self.sync()
        self.changed.emit()

    def _chip(self, image: PreparedImage) -> QWidget:
        chip = QFrame()
        chip.setObjectName("imageChip")
        chip.setFrameShape(QFrame.Shape.StyledPanel)
        row = QHBoxLayout(chip)
        row.setContentsMargins(2, 2, 2, 2)
        thumb = QLabel()
        picture = QImage()
        picture.loadFromData(image.data)
        thumb.setPixmap(QPixmap.fromImage(scaled_thumbnail(picture, CHIP_SIZE)))
        thumb.setToolTip(f"{image.name} · {image.width}x{image.height}")
        thumb.setAccessibleName(f"Attached image {image.name}")
        name = QLabel(f"{image.name}\n{image.width}x{image.height}")
        name.setObjectName("imageChipName")
        close = QToolButton()
        close.setText("\u00d7")
        close.setToolTip(f"Remove {image.name}")
        close.setAccessibleName(f"Remove {image.name}")
        close.clicked.connect(lambda: self.remove(image))
        row.addWidget(thumb)
        row.addWidget(name)
        row.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        return chip


def _holds_image(mime: QMimeData) -> bool:
    """An image to attach: image data and no text (a spreadsheet's cells carry both, and
    pasting them means their text)."""
    return mime.hasImage() and not (mime.hasText() and mime.text().strip())


def _drop_has_images(mime: QMimeData) -> bool:
    urls = [Path(url.toLocalFile()) for url in mime.urls() if url.isLocalFile()]
    return any(is_image_path(p) for p in urls) or (mime.hasImage() and not mime.hasUrls())


class _Intake(QObject):
    """Catches an image paste (``keys``) and image drops on one widget for the chips."""

    def __init__(self, images: PendingImages, keys: bool) -> None:
        super().__init__(images)
        self._images = images
        self._keys = keys

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        kind = event.type()
        if self._keys and kind == QEvent.Type.KeyPress:
            assert isinstance(event, QKeyEvent)
            if event.matches(QKeySequence.StandardKey.Paste):
                return self._images.paste()  # text pastes go on to the message box
            return False
        if kind in (QEvent.Type.DragEnter, QEvent.Type.DragMove):
            assert isinstance(event, QDragEnterEvent | QDropEvent)
            mime = event.mimeData()
            if mime is not None and _drop_has_images(mime):
                event.acceptProposedAction()
                return True
        elif kind == QEvent.Type.Drop:
            assert isinstance(event, QDropEvent)
            mime = event.mimeData()
            if mime is not None and _drop_has_images(mime):
                event.acceptProposedAction()
                self._images.drop(mime)
                return True
        return False
