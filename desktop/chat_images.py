"""Images in the chat window without its widgets: checking one before it is attached, keeping
it beside the history, and sending a conversation's images to the pipeline (issue 23).

An image is checked with the server's own decoder and limits
(:func:`engine.server.images.decode_image`), so the chat refuses exactly what a request would
be refused for, naming the file. An attached image is kept as the bytes the model will get:
a PNG or JPEG file as it came, anything else (GIF, WebP, BMP, a pasted screenshot) as a PNG
of its first frame. When the message is sent the bytes go into the chat's own folder
(``<chats>/images/<chat id>/<sha256>.<ext>``: the same image twice is one file) and the
message names the file (:class:`desktop.history.ImageRecord`); the history's JSON never
holds base64.

Threading: pure functions and small file reads/writes, called on the GUI thread (images are
at most :data:`engine.server.images.MAX_IMAGE_BYTES`, a chat sends at most
:data:`engine.server.images.MAX_IMAGES_PER_REQUEST`).
"""

from __future__ import annotations

import base64
import hashlib
import io
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from desktop.history import IMAGES_FOLDER, ChatMessage, Conversation, ImageRecord, sent_to_model
from engine.server.errors import APIError
from engine.server.images import (
    MAX_IMAGE_BYTES,
    MAX_IMAGES_PER_REQUEST,
    ImageRef,
    decode_image,
)

logger = logging.getLogger(__name__)

# What the file dialog offers (the server also reads BMP; the dialog keeps to the usual ones).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif")
FILE_FILTER = "Images (*.png *.jpg *.jpeg *.webp *.gif)"
PASTED_NAME = "pasted image"


class ImageRefused(ValueError):
    """The image cannot be attached; the message names it and says why, for a person."""


@dataclass(frozen=True)
class PreparedImage:
    """A checked image waiting to be sent: the bytes the model gets and how it is shown."""

    name: str
    data: bytes  # PNG or JPEG
    suffix: str  # ".png" or ".jpg"
    width: int
    height: int

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def file_name(self) -> str:
        return f"{self.digest}{self.suffix}"


def is_image_path(path: Path) -> bool:
    """Whether a dropped file looks like an image (by its name; its content is checked)."""
    return path.suffix.lower() in IMAGE_SUFFIXES


def read_image_file(path: Path) -> PreparedImage:
    """The image file ``path``, checked; :class:`ImageRefused` names it when it cannot go."""
    try:
        size = path.stat().st_size
        if size > MAX_IMAGE_BYTES:
            raise ImageRefused(
                f"{path.name} is {size / 2**20:.1f} MB; images up to "
                f"{MAX_IMAGE_BYTES // 2**20} MB can be attached."
            )
        data = path.read_bytes()
    except OSError as exc:
        raise ImageRefused(f"{path.name} cannot be read: {exc.strerror or exc}") from exc
    return prepare_image(data, path.name)


def prepare_image(data: bytes, name: str) -> PreparedImage:
    """Check ``data`` as the server would (size, pixels, format, damage) and keep the bytes
    the model will get.

    Raises:
        ImageRefused: the server's reason, naming ``name``.
    """
    if len(data) > MAX_IMAGE_BYTES:
        raise ImageRefused(
            f"{name} is {len(data) / 2**20:.1f} MB; images up to "
            f"{MAX_IMAGE_BYTES // 2**20} MB can be attached."
        )
    ref = ImageRef(base64.b64encode(data).decode("ascii"), name)
    try:
        pixels = decode_image(ref)  # the server's decoder: the same refusals, named
    except APIError as exc:
        raise ImageRefused(exc.message) from exc
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return PreparedImage(name, data, ".png", pixels.width, pixels.height)
    if data.startswith(b"\xff\xd8"):
        return PreparedImage(name, data, ".jpg", pixels.width, pixels.height)
    png = _png(pixels.width, pixels.height, pixels.rgb)
    return PreparedImage(name, png, ".png", pixels.width, pixels.height)


def _png(width: int, height: int, rgb: bytes) -> bytes:
    """8-bit RGB pixels (the decoder's first frame) as a PNG file."""
    from PIL import Image

    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), rgb).save(out, format="PNG")
    return out.getvalue()


def check_room(earlier: int, pending: int, name: str) -> None:
    """A request carries at most :data:`MAX_IMAGES_PER_REQUEST` images, the chat's earlier
    ones included (every turn is sent again).

    Raises:
        ImageRefused: ``name`` would be one too many.
    """
    if earlier + pending + 1 > MAX_IMAGES_PER_REQUEST:
        raise ImageRefused(
            f"{name} is not attached: a chat can send at most {MAX_IMAGES_PER_REQUEST} images "
            f"to the model and this one has {earlier + pending} already; start a new chat."
        )


def images_sent(conversation: Conversation) -> int:
    """The images the model gets again with the next message (turns not dropped)."""
    return sum(len(m.get("images", [])) for m in conversation.messages if sent_to_model(m))


def store_image(chats: Path, conversation_id: str, image: PreparedImage) -> ImageRecord:
    """Keep ``image`` in the chat's folder under ``chats`` (written once, atomically)."""
    folder = chats / IMAGES_FOLDER / conversation_id
    target = folder / image.file_name
    if not target.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".image-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(image.data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return ImageRecord(
        name=image.name,
        file=f"{IMAGES_FOLDER}/{conversation_id}/{image.file_name}",
        width=image.width,
        height=image.height,
        size=len(image.data),
    )


def record_path(chats: Path, record: ImageRecord) -> Path:
    """The file of a stored image (``record["file"]`` is relative to the chats folder)."""
    return chats / record["file"]


def load_image(chats: Path, record: ImageRecord) -> PreparedImage:
    """A stored image back as a pending one (an edit, a refused message sent again).

    Raises:
        ImageRefused: its file is gone or unreadable.
    """
    path = record_path(chats, record)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ImageRefused(
            f"{record['name']} is no longer kept with this chat ({path} cannot be read)"
        ) from exc
    return PreparedImage(record["name"], data, path.suffix, record["width"], record["height"])


def engine_request(
    conversation: Conversation, chats: Path
) -> tuple[list[dict[str, Any]], tuple[ImageRef, ...]]:
    """What the model sees (:meth:`Conversation.engine_messages`) with each sent message's
    images read from disk: the request's images in order, each turn naming its own by index
    in ``turn["images"]`` (as every dialect's translator does).

    Raises:
        APIError: 400 naming the image whose file is gone (the message then shows as not
            sent, with the reason).
    """
    turns = conversation.engine_messages()
    sent: list[ChatMessage] = [m for m in conversation.messages if sent_to_model(m)]
    refs: list[ImageRef] = []
    # engine_messages is the system prompt (if any) then one turn per sent message, in order.
    for turn, message in zip(turns[len(turns) - len(sent) :], sent, strict=True):
        records = message.get("images", [])
        if not records:
            continue
        indexes = []
        for record in records:
            path = record_path(chats, record)
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise APIError(
                    400,
                    f"{record['name']}: the image is no longer kept with this chat "
                    f"({path} cannot be read); delete the message or attach it again",
                    param=record["name"],
                    code="invalid_image",
                ) from exc
            refs.append(ImageRef(base64.b64encode(data).decode("ascii"), record["name"]))
            indexes.append(len(refs) - 1)
        turn["images"] = indexes
    return turns, tuple(refs)


def cannot_see_text(model: str | None, seeing: list[str]) -> str:
    """Why images cannot be attached now: "<model> cannot see images; models that can: …"."""
    others = (
        f"models that can: {', '.join(seeing)}"
        if seeing
        else "no installed model can (add a vision-language model, e.g. an OpenVINO Qwen2.5-VL)"
    )
    return f"{model or 'No model'} cannot see images; {others}"


def failed_images(conversation: Conversation) -> list[ImageRecord]:
    """The images of the refused message waiting at the end of the chat (sent again,
    edited or carried to a new chat with its text)."""
    for message in reversed(conversation.messages):
        if message["role"] == "user":
            return list(message.get("images", [])) if message.get("failed", False) else []
    return []
