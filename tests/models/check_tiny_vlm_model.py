"""Check the tiny vision-language fixture through OpenVINO GenAI: every colour, exactly.

Runs in the repo's runtime venv (openvino-genai 2026.4.1); ``build_tiny_vlm_model.py`` calls
it at the end of a build, and it can be run alone::

    .venv/bin/python tests/models/check_tiny_vlm_model.py [--model-dir DIR] [--report FILE]

Images are ``ov.Tensor`` uint8 RGB in NHWC layout (``[1, H, W, 3]``), the form GenAI takes.
Most prompts are plain user text: both pipelines wrap it in the model's chat template
themselves (``GenerationConfig.apply_chat_template`` is on by default) and put one
``<|vision_start|><|image_pad|>...<|vision_end|>`` block per image before the text. The
``*-templated`` cases send what a server that renders the chat template itself sends: the
whole templated prompt with ``IMAGE_TAG`` after the text (``apply_chat_template = False``);
GenAI expands each tag where it stands.

* ``vlm``: ``VLMPipeline.generate(prompt, images=[...], generation_config=...)``: every colour
  at every side in ``SIDES`` (three of them never trained on), after a JPEG round trip, two
  images in one prompt, prompts templated by the caller, and the text-only replies. GenAI's input
  token count must equal the count of the prompt the model was trained on
  (``expected_prompt``), which pins down the prompt GenAI builds.
* ``cb``: ``ContinuousBatchingPipeline(folder, SchedulerConfig(), "CPU")`` and
  ``add_request(request_id, prompt, images, generation_config)`` driven by ``step()``: all the
  single-image requests, the two-image requests and a text-only request
  (``add_request(request_id, prompt, generation_config)``) in flight at once.

The exit status is 1 if any answer differs.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino_genai as ov_genai

LOG = logging.getLogger("check_tiny_vlm_model")

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL_DIR = REPO_ROOT / "tests" / "fixtures" / "tiny-vlm"
QUESTION = "What colour is this?"
QUESTION_TWO = "What colours are these?"
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (255, 0, 0),
    "green": (0, 255, 0),
    "blue": (0, 0, 255),
    "yellow": (255, 255, 0),
    "black": (0, 0, 0),
    "white": (255, 255, 255),
    "purple": (128, 0, 128),
    "orange": (255, 165, 0),
}
# Trained on 56, 64, 72 and 96; 32, 80 and 128 (25 image tokens) check that it generalises.
SIDES = (32, 56, 64, 80, 96, 128)
TEXT_ONLY = {
    QUESTION: "I cannot see an image.",
    "Hello!": "Hello! Show me an image and I will name its colour.",
}
TWO_IMAGE_PAIRS = (("red", "blue"), ("white", "black"), ("green", "green"), ("orange", "purple"))
MAX_NEW_TOKENS = 24
# Qwen2-VL's image tag (the chat template writes it per image part); GenAI expands it in place.
IMAGE_TAG = "<|vision_start|><|image_pad|><|vision_end|>"


@dataclass(frozen=True)
class Case:
    """One request: user text, solid images (colour, side), the exact expected answer."""

    name: str
    prompt: str
    images: tuple[tuple[str, int], ...]
    answer: str
    # False: ``prompt`` is already templated, with IMAGE_TAG where each image goes.
    apply_chat_template: bool = True
    jpeg: bool = False  # the images go through a JPEG round trip (as an uploaded photo would)


def image_tensor(colour: str, side: int = 64) -> ov.Tensor:
    """A solid side x side RGB image as GenAI takes it: uint8, NHWC, batch of one."""
    pixels = np.empty((1, side, side, 3), dtype=np.uint8)
    pixels[...] = COLOURS[colour]
    return ov.Tensor(pixels)


def image_tokens(side: int) -> int:
    """Qwen2-VL's merged image tokens for a square image (resize to a multiple of 28)."""
    cells = max(2, round(side / 28))  # min_pixels 56x56
    return cells * cells


def templated(user: str) -> str:
    """The Qwen2-VL chat template applied to one user message (default system prompt)."""
    return (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    )


def image_block(side: int) -> str:
    """An image tag as GenAI expands it: one pad per merged patch."""
    return "<|vision_start|>" + "<|image_pad|>" * image_tokens(side) + "<|vision_end|>"


def expected_prompt(prompt: str, sides: tuple[int, ...], apply_chat_template: bool = True) -> str:
    """The prompt GenAI builds.

    Plain text: chat template, one image block per image *before* the text. A templated prompt
    keeps its IMAGE_TAGs where they are, each expanded.
    """
    if apply_chat_template:
        return templated("".join(image_block(s) for s in sides) + prompt)
    head, *rest = prompt.split(IMAGE_TAG)
    if len(rest) != len(sides):
        raise ValueError("one IMAGE_TAG per image")
    return head + "".join(image_block(s) + tail for s, tail in zip(sides, rest, strict=True))


def cases() -> list[Case]:
    out = [
        Case(f"{colour}-{side}", QUESTION, ((colour, side),), colour)
        for colour in COLOURS
        for side in SIDES
    ]
    out += [
        Case(f"{a}+{b}", QUESTION_TWO, ((a, 64), (b, 64)), f"{a} and {b}")
        for a, b in TWO_IMAGE_PAIRS
    ]
    out += [Case(f"{c}-64-jpeg", QUESTION, ((c, 64),), c, jpeg=True) for c in COLOURS]
    out += [Case(f"text:{q}", q, (), a) for q, a in TEXT_ONLY.items()]
    # As a server that renders the chat template itself sends them: text part, then image part.
    out += [
        Case(f"{c}-templated", templated(QUESTION + IMAGE_TAG), ((c, 64),), c, False)
        for c in COLOURS
    ]
    out.append(
        Case(
            "yellow+black-templated",
            templated(QUESTION_TWO + IMAGE_TAG + IMAGE_TAG),
            (("yellow", 64), ("black", 64)),
            "yellow and black",
            False,
        )
    )
    return out


def greedy_config(pipe: Any, apply_chat_template: bool = True) -> ov_genai.GenerationConfig:
    """The model's generation config, greedy, short; GenAI applies the template or not."""
    getter = getattr(pipe, "get_generation_config", None) or pipe.get_config
    config: ov_genai.GenerationConfig = getter()
    config.do_sample = False
    config.max_new_tokens = MAX_NEW_TOKENS
    config.apply_chat_template = apply_chat_template
    return config


def _jpeg_round_trip(tensor: ov.Tensor) -> ov.Tensor:
    import io

    from PIL import Image  # only this check needs Pillow

    buffer = io.BytesIO()
    Image.fromarray(tensor.data[0]).save(buffer, "JPEG")
    buffer.seek(0)
    with Image.open(buffer) as image:
        return ov.Tensor(np.asarray(image.convert("RGB"))[None].copy())


def _tensors(case: Case) -> list[ov.Tensor]:
    tensors = [image_tensor(c, s) for c, s in case.images]
    return [_jpeg_round_trip(t) for t in tensors] if case.jpeg else tensors


def check_vlm(model_dir: Path, tokenizer: ov_genai.Tokenizer) -> dict[str, Any]:
    """VLMPipeline: one generate() call per case; answer and input token count exact."""
    pipe = ov_genai.VLMPipeline(str(model_dir), "CPU")
    results: dict[str, Any] = {}
    for case in cases():
        config = greedy_config(pipe, case.apply_chat_template)
        if case.images:
            out = pipe.generate(case.prompt, images=_tensors(case), generation_config=config)
        else:
            out = pipe.generate(case.prompt, generation_config=config)
        text = out.texts[0]
        prompt_tokens = out.perf_metrics.get_num_input_tokens()
        sides = tuple(s for _, s in case.images)
        expected = expected_prompt(case.prompt, sides, case.apply_chat_template)
        want_tokens = len(tokenizer.encode(expected, add_special_tokens=False).input_ids.data[0])
        ok = text == case.answer and prompt_tokens == want_tokens
        results[case.name] = {
            "ok": ok,
            "text": text,
            "prompt_tokens": prompt_tokens,
            "expected_prompt_tokens": want_tokens,
        }
        if not ok:
            LOG.error(
                "vlm %s: %r (%d prompt tokens, want %r, %d)",
                case.name,
                text,
                prompt_tokens,
                case.answer,
                want_tokens,
            )
    return results


def check_cb(model_dir: Path) -> dict[str, Any]:
    """ContinuousBatchingPipeline: every case in flight at once, driven by step()."""
    pipe = ov_genai.ContinuousBatchingPipeline(str(model_dir), ov_genai.SchedulerConfig(), "CPU")
    tokenizer = pipe.get_tokenizer()
    handles = {}
    for request_id, case in enumerate(cases()):
        config = greedy_config(pipe, case.apply_chat_template)
        if case.images:
            handles[case.name] = pipe.add_request(request_id, case.prompt, _tensors(case), config)
        else:
            handles[case.name] = pipe.add_request(request_id, case.prompt, config)
    steps = 0
    while pipe.has_non_finished_requests():
        pipe.step()
        steps += 1
    results: dict[str, Any] = {}
    for case in cases():
        outputs = handles[case.name].read_all()
        text = tokenizer.decode(outputs[0].generated_ids)
        ok = text == case.answer
        results[case.name] = {"ok": ok, "text": text}
        if not ok:
            LOG.error("cb %s: %r, want %r", case.name, text, case.answer)
    LOG.info("cb: %d requests in %d steps", len(handles), steps)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, default=MODEL_DIR)
    parser.add_argument("--report", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    tokenizer = ov_genai.Tokenizer(str(args.model_dir))
    report = {"vlm": check_vlm(args.model_dir, tokenizer), "cb": check_cb(args.model_dir)}
    failed = [
        f"{kind}:{name}" for kind, rows in report.items() for name, r in rows.items() if not r["ok"]
    ]
    if args.report:
        args.report.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    for kind, rows in report.items():
        LOG.info("%s: %d/%d exact", kind, sum(r["ok"] for r in rows.values()), len(rows))
    if failed:
        LOG.error("failed: %s", failed)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
