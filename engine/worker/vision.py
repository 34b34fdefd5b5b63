"""Images for a vision-language model's requests: their place in the prompt and their tokens.

GenAI's continuous-batching pipeline takes a VLM request as a prompt string and images
(``add_request(id, prompt, images, config)``). The worker templates the messages itself (as
it does for text) and marks each image with GenAI's universal tag ``<ov_genai_image_N>``,
which GenAI replaces by the model's own vision tokens (Qwen2-VL:
``<|vision_start|><|image_pad|>...<|vision_end|>``); the config's ``apply_chat_template``
is off, so the template is applied once. An image's place is before its message's text
(Ollama's rule, and the order Qwen2-VL's processor uses for an image-then-question turn).

How many tokens an image costs is the model family's resize rule, computed here from the
folder's ``preprocessor_config.json`` (exact for the Qwen2-VL family, whose count depends on
the image's size); other families cost their config's ``image_seq_length`` (LLaVA, Gemma 3),
else :data:`DEFAULT_IMAGE_TOKENS`. Usage, the context check and ``count_tokens`` add it.

Threading: pure functions, called on the worker's loop thread.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.models import read_json
from engine.worker.messages import ImageInput

IMAGE_TAG = "<ov_genai_image_{index}>"
TAG_PREFIX = "<ov_genai_image_"
DEFAULT_IMAGE_TOKENS = 256
_QWEN_VL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")

ImageTokens = Callable[[int, int], int]
"""How many prompt tokens an image of (width, height) pixels costs."""


def image_tag(index: int) -> str:
    return IMAGE_TAG.format(index=index)


def with_image_tags(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` for the template: each one's images (``message["images"]``, indices) as
    tags before its text; the ``images`` key removed."""
    out = []
    for message in messages:
        indices = message.get("images")
        if not indices:
            out.append(message)
            continue
        rest = {k: v for k, v in message.items() if k != "images"}
        tags = "".join(image_tag(int(i)) for i in indices)
        rest["content"] = tags + str(message.get("content") or "")
        out.append(rest)
    return out


def without_tags(text: str, count: int) -> str:
    """``text`` with the tags of ``count`` images removed (what the tokenizer counts)."""
    for index in range(count):
        text = text.replace(image_tag(index), "")
    return text


def to_tensor(image: ImageInput) -> Any:
    """An ``ov.Tensor`` of ``image``: uint8 RGB, NHWC ``[1, height, width, 3]``."""
    import numpy as np
    import openvino as ov

    pixels = np.frombuffer(image.rgb, dtype=np.uint8).reshape(1, image.height, image.width, 3)
    return ov.Tensor(np.ascontiguousarray(pixels))


def image_token_counter(folder: Path) -> ImageTokens:
    """The image-token rule of the model in ``folder`` (see the module docstring)."""
    config = read_json(folder / "config.json")
    if str(config.get("model_type")) in _QWEN_VL_TYPES:
        return _qwen_vl_counter(read_json(folder / "preprocessor_config.json"))
    fixed = config.get("image_seq_length") or config.get("mm_tokens_per_image")
    tokens = fixed if isinstance(fixed, int) and fixed > 0 else DEFAULT_IMAGE_TOKENS
    return lambda width, height: tokens


def _qwen_vl_counter(pre: dict[str, Any]) -> ImageTokens:
    raw_size = pre.get("size")
    size: dict[str, Any] = raw_size if isinstance(raw_size, dict) else {}
    min_pixels = int(pre.get("min_pixels") or size.get("shortest_edge") or 56 * 56)
    max_pixels = int(pre.get("max_pixels") or size.get("longest_edge") or 28 * 28 * 1280)
    patch = int(pre.get("patch_size") or 14)
    merge = int(pre.get("merge_size") or 2)

    def count(width: int, height: int) -> int:
        h, w = qwen_vl_resize(height, width, patch * merge, min_pixels, max_pixels)
        return (h // patch) * (w // patch) // (merge * merge) + 2  # + vision start and end

    return count


def qwen_vl_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """Qwen2-VL's ``smart_resize`` as GenAI 2026.4 computes it: both sides multiples of
    ``factor``, the area within [min_pixels, max_pixels], the aspect ratio kept (C++
    rounding: halves away from zero). A side shorter than half a ``factor`` rounds to 0,
    which sends the image through the ``min_pixels`` branch (checked against GenAI's own
    input-token counts for 1x1, 27x29, 2x300, 64x64, 100x60, 333x777 and 1000x1000)."""
    h_bar = _round(height / factor) * factor
    w_bar = _round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = math.floor(height / beta / factor) * factor
        w_bar = math.floor(width / beta / factor) * factor
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _round(value: float) -> int:
    return math.floor(value + 0.5)
