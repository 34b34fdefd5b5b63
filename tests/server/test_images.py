"""engine/server/images.py on images Pillow makes here: what is taken, what becomes RGB, and
every refusal a 400 naming the part."""

from __future__ import annotations

import base64
import io
import struct
import zlib

import pytest
from PIL import Image

from engine.server import images
from engine.server.errors import APIError
from engine.server.images import (
    ImageList,
    ImageRef,
    decode_image,
    decode_images,
    image_from_base64,
    image_from_url,
)
from engine.worker.vision import image_token_counter, qwen_vl_resize, with_image_tags

FIELD = "messages.0.content.1.image_url"


def encoded(image: Image.Image, fmt: str = "PNG", **options: object) -> str:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return base64.b64encode(buffer.getvalue()).decode()


def ref(data: str) -> ImageRef:
    return ImageRef(data, FIELD)


def refusal(data: str) -> APIError:
    with pytest.raises(APIError) as caught:
        decode_image(ref(data))
    assert caught.value.status == 400
    assert caught.value.param == FIELD
    assert caught.value.message.startswith(f"{FIELD}: ")
    return caught.value


def pixel(image_data: str) -> tuple[int, int, int]:
    decoded = decode_image(ref(image_data))
    return tuple(decoded.rgb[:3])  # type: ignore[return-value]


def test_an_rgb_png_comes_back_as_its_pixels() -> None:
    decoded = decode_image(ref(encoded(Image.new("RGB", (64, 32), (200, 10, 30)))))
    assert (decoded.width, decoded.height) == (64, 32)
    assert decoded.rgb == bytes((200, 10, 30)) * (64 * 32)


@pytest.mark.parametrize(
    ("image", "fmt", "expected"),
    [
        (Image.new("RGBA", (8, 8), (255, 0, 0, 0)), "PNG", (255, 255, 255)),  # on white
        (Image.new("RGBA", (8, 8), (0, 0, 255, 255)), "PNG", (0, 0, 255)),
        (Image.new("LA", (8, 8), (0, 255)), "PNG", (0, 0, 0)),
        (Image.new("L", (8, 8), 128), "PNG", (128, 128, 128)),
        (Image.new("1", (8, 8), 1), "PNG", (255, 255, 255)),
        (Image.new("RGB", (8, 8), (0, 255, 0)).convert("P"), "GIF", (0, 255, 0)),
        (Image.new("CMYK", (8, 8), (0, 0, 0, 0)), "JPEG", (255, 255, 255)),
        (Image.new("I;16", (8, 8), 65535), "PNG", (255, 255, 255)),
        (Image.new("RGB", (8, 8), (0, 0, 255)), "WEBP", None),
        (Image.new("RGB", (8, 8), (0, 0, 255)), "BMP", (0, 0, 255)),
    ],
)
def test_every_mode_becomes_8_bit_rgb(
    image: Image.Image, fmt: str, expected: tuple[int, int, int] | None
) -> None:
    data = encoded(image, fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    decoded = decode_image(ref(data))
    assert len(decoded.rgb) == decoded.width * decoded.height * 3
    if expected is not None:
        assert pixel(data) == expected


def test_an_animation_gives_its_first_frame() -> None:
    frames = [Image.new("RGB", (8, 8), colour) for colour in ((255, 0, 0), (0, 0, 255))]
    buffer = io.BytesIO()
    frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:], duration=100)
    assert pixel(base64.b64encode(buffer.getvalue()).decode()) == (255, 0, 0)


def test_damaged_images_are_refused_naming_the_part() -> None:
    whole = base64.b64decode(encoded(Image.new("RGB", (64, 64), (1, 2, 3)), "JPEG"))
    truncated = base64.b64encode(whole[: len(whole) // 2]).decode()
    assert "cannot be decoded" in refusal(truncated).message
    assert "not an image" in refusal(base64.b64encode(b"just some text").decode()).message
    assert "not valid base64" in refusal("@@@not base64@@@").message
    assert "empty" in refusal("").message
    tiff = encoded(Image.new("RGB", (8, 8)), "TIFF")
    assert "not an image in a supported format" in refusal(tiff).message


def test_a_decompression_bomb_is_refused_before_its_pixels_are_decoded() -> None:
    """A PNG whose header declares 100,000 x 100,000 pixels (a few hundred bytes of file)."""
    header = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    bomb = (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 1000))
    )
    bomb += chunk(b"IEND", b"")
    error = refusal(base64.b64encode(bomb).decode())
    assert error.code == "image_too_large" and "larger than 16,777,216 pixels" in error.message


def test_size_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images, "MAX_IMAGE_BYTES", 1000)
    assert refusal("A" * 2000).code == "image_too_large"
    monkeypatch.undo()
    thin = encoded(Image.new("RGB", (1000, 2)))
    assert "times as wide as tall" in refusal(thin).message
    monkeypatch.setattr(images, "MAX_REQUEST_PIXELS", 64 * 64 + 1)
    square = encoded(Image.new("RGB", (64, 64)))
    with pytest.raises(APIError) as together:
        decode_images((ImageRef(square, "images.0"), ImageRef(square, "images.1")))
    assert together.value.param == "images.1" and together.value.code == "image_too_large"


def test_at_most_n_images_naming_the_first_extra() -> None:
    listed = ImageList()
    for k in range(images.MAX_IMAGES_PER_REQUEST):
        assert listed.add(ImageRef("x", f"images.{k}")) == k
    with pytest.raises(APIError) as extra:
        listed.add(ImageRef("x", "images.8"))
    assert extra.value.param == "images.8" and extra.value.code == "too_many_images"


def test_only_inline_data_urls_are_taken() -> None:
    png = encoded(Image.new("RGB", (4, 4)))
    assert image_from_url(f"data:image/png;base64,{png}", FIELD) == ImageRef(png, FIELD)
    assert image_from_base64(png, FIELD) == ImageRef(png, FIELD)
    assert image_from_base64(f"data:image/png;base64,{png}", FIELD) == ImageRef(png, FIELD)
    for url, words in (
        ("http://127.0.0.1:11434/api/tags", "remote image URLs are not fetched"),
        ("HTTPS://example.com/cat.png", "remote image URLs are not fetched"),
        ("file:///etc/passwd", "must be a data URL"),
        ("data:image/png,rawbytes", "must be base64"),
        ("data:text/html;base64,PGgxPg==", "not an image"),
    ):
        with pytest.raises(APIError) as caught:
            image_from_url(url, FIELD)
        assert caught.value.param == FIELD and words in caught.value.message


def test_qwen_vl_image_tokens_follow_its_resize_rule(tmp_path: object) -> None:
    assert qwen_vl_resize(64, 64, 28, 56 * 56, 28 * 28 * 1280) == (56, 56)
    assert qwen_vl_resize(1000, 2000, 28, 56 * 56, 28 * 28 * 1280) == (700, 1400)
    from pathlib import Path

    folder = Path(str(tmp_path))
    (folder / "config.json").write_text('{"model_type": "qwen2_vl"}')
    count = image_token_counter(folder)
    assert count(64, 64) == 4 + 2  # four <|image_pad|>, vision start and end
    assert count(2000, 1000) == (700 // 14) * (1400 // 14) // 4 + 2


def test_images_go_before_their_message_text_as_genai_tags() -> None:
    messages = [{"role": "user", "content": "What colour is this?", "images": [0, 1]}]
    assert with_image_tags(messages) == [
        {"role": "user", "content": "<ov_genai_image_0><ov_genai_image_1>What colour is this?"}
    ]
