"""Thumbnails of a message's images in the transcript (issue 23).

The transcript is a ``QTextDocument``: each image is a document resource (a scaled copy,
cached by file: files are named by their content's hash, so a name never changes meaning)
drawn inline above the message's text. The chat window tells the document where the chats
folder is (:func:`show_images_from`); a file that is gone shows as its name, marked missing.

Threading: GUI thread only.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtGui import (
    QImage,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextImageFormat,
)
from PySide6.QtWidgets import QTextBrowser

from desktop import theme
from desktop.history import ImageRecord

THUMBNAIL_SIZE = 96  # the longer side, in logical pixels
_FOLDER_PROPERTY = "sidelightChatsFolder"
_SCHEME = "sidelight-image"


def show_images_from(view: QTextBrowser, chats: Path) -> None:
    """Images named in messages are files under ``chats`` (the history's folder)."""
    view.document().setProperty(_FOLDER_PROPERTY, str(chats))


def write_thumbnails(cursor: QTextCursor, records: list[ImageRecord]) -> None:
    """Each image as a thumbnail on one line (its name and size in the tooltip), then a new
    line for the text."""
    if not records:
        return
    document = cursor.document()
    folder = document.property(_FOLDER_PROPERTY)
    for number, record in enumerate(records):
        if number:
            cursor.insertText("  ", QTextCharFormat())
        image = _thumbnail(str(Path(folder) / record["file"])) if folder else None
        if image is None:
            missing = QTextCharFormat()
            missing.setForeground(theme.colour("dim"))
            missing.setFontItalic(True)
            cursor.insertText(f"[image {record['name']}: missing]", missing)
            continue
        url = QUrl(f"{_SCHEME}:{record['file']}")
        document.addResource(QTextDocument.ResourceType.ImageResource.value, url, image)
        shown = QTextImageFormat()
        shown.setName(url.toString())
        shown.setWidth(image.width())
        shown.setHeight(image.height())
        shown.setToolTip(f"{record['name']} · {record['width']}x{record['height']}")
        cursor.insertImage(shown)
    cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())


@lru_cache(maxsize=64)
def _thumbnail(path: str) -> QImage | None:
    image = QImage(path)
    if image.isNull():
        return None
    return scaled_thumbnail(image, THUMBNAIL_SIZE)


def scaled_thumbnail(image: QImage, size: int) -> QImage:
    """``image`` at most ``size`` pixels on its longer side (a smaller one as it is)."""
    from PySide6.QtCore import Qt

    longer = max(image.width(), image.height())
    target = min(size, longer)
    return image.scaled(
        target,
        target,
        Qt.AspectRatioMode.KeepAspectRatio,
        Qt.TransformationMode.SmoothTransformation,
    )
