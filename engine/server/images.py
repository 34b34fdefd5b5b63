"""Images in requests: where they may come from, and decoding them safely before the worker.

Every dialect names its images differently (OpenAI ``image_url`` data URLs, Responses
``input_image``, Anthropic ``source.type: base64``, Ollama ``images``, LM Studio image
items); its translator turns each into an :class:`ImageRef` (the encoded data and the field
it came from) with :func:`image_from_url` or :func:`image_from_base64`. The pipeline decodes
them with :func:`decode_images` (on a thread: decoding a large image takes a while) once it
knows the model can see, so the worker only ever gets checked 8-bit RGB pixels
(:class:`engine.worker.messages.ImageInput`).

Hostile by default:

- remote ``http(s)`` URLs are never fetched (a local server that fetches whatever URL a
  request names is an SSRF hole into the person's network): a 400 naming the field;
- an encoded image over :data:`MAX_IMAGE_BYTES`, a header declaring more than
  :data:`MAX_IMAGE_PIXELS` (decompression bombs: checked before any pixel is decoded, and
  Pillow's own bomb guard is set to the same limit), more than
  :data:`MAX_REQUEST_PIXELS` in one request, more than :data:`MAX_IMAGES_PER_REQUEST`
  images, a truncated file, a format outside :data:`FORMATS` or data that is not an image:
  each a 400 naming the part;
- animated images give their first frame; CMYK, palette, alpha (composited on white),
  grayscale and 16-bit images become 8-bit RGB.

Threading: pure functions; :func:`decode_images` is CPU work meant for a worker thread.
"""

from __future__ import annotations

import base64
import binascii
import io
import logging
import re
import warnings
from dataclasses import dataclass

from engine.echo import clip
from engine.server.errors import APIError
from engine.worker.messages import ImageInput

logger = logging.getLogger(__name__)

MAX_IMAGES_PER_REQUEST = 8
MAX_IMAGE_BYTES = 16 * 1024 * 1024  # one encoded image (the body limit bounds the request)
MAX_IMAGE_PIXELS = 4096 * 4096  # one image, as its header declares it
MAX_REQUEST_PIXELS = 2 * MAX_IMAGE_PIXELS  # every image of a request together
MAX_ASPECT_RATIO = 200  # vision encoders (Qwen2-VL's resize) refuse thinner images
FORMATS = ("PNG", "JPEG", "GIF", "WEBP", "BMP")
_DATA_URL = re.compile(r"data:(?P<type>[\w.+-]+/[\w.+-]+)?(?P<params>(?:;[^,;]*)*),", re.ASCII)


@dataclass(frozen=True)
class ImageRef:
    """An image as the request sent it, not yet decoded: base64 text and where it was."""

    data: str  # base64 (standard or URL-safe alphabet), no ``data:`` prefix
    field: str  # the request field, e.g. ``messages[0].content[1].image_url``


def image_refused(field: str, message: str, code: str = "invalid_image") -> APIError:
    """A 400 naming the image's field."""
    return APIError(400, f"{field}: {message}", param=field, code=code)


def image_from_url(url: str, field: str) -> ImageRef:
    """The image a URL field holds: only ``data:`` URLs with base64 data are taken.

    Raises:
        APIError: 400 for a remote ``http(s)`` URL (never fetched), any other scheme, or a
            data URL that is not base64.
    """
    head = url[:16].strip().lower()
    if head.startswith(("http://", "https://")):
        raise image_refused(
            field,
            "remote image URLs are not fetched (a local server that fetches URLs from "
            "requests would let any page reach your network); send the image inline as a "
            "data URL, e.g. data:image/png;base64,...",
            "image_url_not_allowed",
        )
    if not head.startswith("data:"):
        raise image_refused(
            field, f"an image must be a data URL (data:image/png;base64,...), not {clip(url, 64)!r}"
        )
    match = _DATA_URL.match(url.strip())
    if match is None or "base64" not in match.group("params").lower().split(";"):
        raise image_refused(field, "a data URL of an image must be base64 (data:image/...;base64,)")
    kind = match.group("type")
    if kind is not None and not kind.lower().startswith("image/"):
        raise image_refused(field, f"the data URL holds {clip(kind)!r}, not an image")
    return ImageRef(url.strip()[match.end() :], field)


def image_from_base64(data: str, field: str) -> ImageRef:
    """An image sent as base64 text (a data URL is taken too: some clients send one)."""
    if data[:5].lower() == "data:":
        return image_from_url(data, field)
    return ImageRef(data, field)


class ImageList:
    """The images of one request as a translator meets them: each gets its index (what a
    message's ``images`` holds); one past :data:`MAX_IMAGES_PER_REQUEST` is refused."""

    def __init__(self) -> None:
        self.refs: list[ImageRef] = []

    def add(self, ref: ImageRef) -> int:
        self.refs.append(ref)
        check_image_count(self.refs)
        return len(self.refs) - 1

    def all(self) -> tuple[ImageRef, ...]:
        return tuple(self.refs)


def check_image_count(refs: tuple[ImageRef, ...] | list[ImageRef]) -> None:
    """At most :data:`MAX_IMAGES_PER_REQUEST` images (the first one over the limit named)."""
    if len(refs) > MAX_IMAGES_PER_REQUEST:
        extra = refs[MAX_IMAGES_PER_REQUEST]
        raise image_refused(
            extra.field,
            f"too many images: a request may carry at most {MAX_IMAGES_PER_REQUEST}, "
            f"this one has {len(refs)}",
            "too_many_images",
        )


def decode_images(refs: tuple[ImageRef, ...]) -> tuple[ImageInput, ...]:
    """Decode and check every image (see the module docstring); one bad image refuses all.

    Raises:
        APIError: 400 naming the first bad image's field.
    """
    check_image_count(refs)
    images: list[ImageInput] = []
    total = 0
    for ref in refs:
        image = decode_image(ref)
        total += image.width * image.height
        if total > MAX_REQUEST_PIXELS:
            raise image_refused(
                ref.field,
                f"the request's images hold more than {MAX_REQUEST_PIXELS:,} pixels together; "
                "send fewer or smaller images",
                "image_too_large",
            )
        images.append(image)
    return tuple(images)


def decode_image(ref: ImageRef) -> ImageInput:
    """One image as 8-bit RGB (first frame), or a 400 naming ``ref.field``."""
    raw = _base64_bytes(ref)
    from PIL import Image, UnidentifiedImageError

    Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS  # Pillow's own bomb guard, the same limit
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(raw), formats=FORMATS) as image:
                _check_size(ref, image.width, image.height)
                image.seek(0)  # an animation: its first frame
                image.load()
                return _rgb(ref, image)
    except APIError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise _too_large(ref) from exc
    except UnidentifiedImageError as exc:
        raise image_refused(
            ref.field, f"not an image in a supported format ({', '.join(FORMATS)})"
        ) from exc
    except (OSError, ValueError, SyntaxError, EOFError) as exc:  # truncated or corrupt
        logger.info("%s: undecodable image: %s", ref.field, exc)
        raise image_refused(
            ref.field, f"the image cannot be decoded (truncated or damaged: {clip(str(exc), 80)})"
        ) from exc


def _base64_bytes(ref: ImageRef) -> bytes:
    text = "".join(ref.data.split())  # base64 wrapped in lines is still base64
    if len(text) * 3 // 4 > MAX_IMAGE_BYTES:
        raise image_refused(
            ref.field,
            f"the image is over {MAX_IMAGE_BYTES // (1024 * 1024)} MB; send a smaller one",
            "image_too_large",
        )
    if not text:
        raise image_refused(ref.field, "the image is empty")
    altchars = b"-_" if ("-" in text or "_" in text) else None
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), altchars=altchars, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise image_refused(ref.field, "the image data is not valid base64") from exc


def _check_size(ref: ImageRef, width: int, height: int) -> None:
    if width < 1 or height < 1:
        raise image_refused(ref.field, "the image has no pixels")
    if width * height > MAX_IMAGE_PIXELS:
        raise _too_large(ref, width, height)
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise image_refused(
            ref.field,
            f"the image is {width}x{height}: at most {MAX_ASPECT_RATIO} times as wide as tall "
            "(or tall as wide)",
        )


def _too_large(ref: ImageRef, width: int | None = None, height: int | None = None) -> APIError:
    size = f" ({width}x{height})" if width and height else ""
    return image_refused(
        ref.field,
        f"the image is larger than {MAX_IMAGE_PIXELS:,} pixels{size}; send a smaller one",
        "image_too_large",
    )


def _rgb(ref: ImageRef, image: object) -> ImageInput:
    """``image`` (a loaded PIL image) as 8-bit RGB bytes."""
    import numpy as np
    from PIL import Image

    assert isinstance(image, Image.Image)
    mode = image.mode
    if mode in ("I;16", "I;16L", "I;16B", "I;16N", "I"):  # 16-bit (and 32-bit) grayscale
        values = np.asarray(image).astype(np.int64)
        top = 65535 if mode.startswith("I;16") or values.max(initial=0) > 255 else 255
        gray = (np.clip(values, 0, top) * 255 // top).astype(np.uint8)
        image = Image.fromarray(gray, "L")
    elif mode == "F":
        image = Image.fromarray(np.clip(np.asarray(image), 0, 255).astype(np.uint8), "L")
    if image.mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        image = Image.alpha_composite(white, rgba)
    if image.mode != "RGB":
        try:
            image = image.convert("RGB")
        except ValueError as exc:
            raise image_refused(
                ref.field, f"images in colour mode {image.mode} are not supported"
            ) from exc
    return ImageInput(image.width, image.height, image.tobytes())
