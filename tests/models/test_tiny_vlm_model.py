"""The tiny vision-language fixture names the colour of an image exactly, through real GenAI.

One ``VLMPipeline`` and one ``ContinuousBatchingPipeline`` per module (loading is the slow
part); every request is real inference on ``tests/fixtures/tiny-vlm``. The prompts are plain
user text: GenAI applies the chat template and places the image blocks itself.
"""

from __future__ import annotations

from collections.abc import Iterator

import openvino_genai as ov_genai
import pytest

from tests.models.check_tiny_vlm_model import (
    COLOURS,
    IMAGE_TAG,
    MODEL_DIR,
    QUESTION,
    QUESTION_TWO,
    TEXT_ONLY,
    expected_prompt,
    greedy_config,
    image_tensor,
    templated,
)


@pytest.fixture(scope="module")
def vlm() -> Iterator[ov_genai.VLMPipeline]:
    yield ov_genai.VLMPipeline(str(MODEL_DIR), "CPU")


@pytest.fixture(scope="module")
def cb() -> Iterator[ov_genai.ContinuousBatchingPipeline]:
    yield ov_genai.ContinuousBatchingPipeline(str(MODEL_DIR), ov_genai.SchedulerConfig(), "CPU")


@pytest.mark.parametrize("colour", sorted(COLOURS))
def test_vlm_pipeline_names_the_colour(vlm: ov_genai.VLMPipeline, colour: str) -> None:
    out = vlm.generate(
        QUESTION, images=[image_tensor(colour)], generation_config=greedy_config(vlm)
    )
    assert out.texts == [colour]


def test_vlm_prompt_is_the_trained_one(vlm: ov_genai.VLMPipeline) -> None:
    """GenAI's prompt: chat template, 4 image pads for 64x64, image block before the text."""
    out = vlm.generate(QUESTION, images=[image_tensor("red")], generation_config=greedy_config(vlm))
    tokenizer = vlm.get_tokenizer()
    expected = tokenizer.encode(expected_prompt(QUESTION, (64,)), add_special_tokens=False)
    assert out.perf_metrics.get_num_input_tokens() == expected.input_ids.get_shape()[1]


def test_vlm_pipeline_two_images(vlm: ov_genai.VLMPipeline) -> None:
    images = [image_tensor("red"), image_tensor("blue")]
    out = vlm.generate(QUESTION_TWO, images=images, generation_config=greedy_config(vlm))
    assert out.texts == ["red and blue"]


def test_vlm_pipeline_templated_prompt_with_the_image_after_the_text(
    vlm: ov_genai.VLMPipeline,
) -> None:
    """A prompt rendered by the caller: GenAI expands the image tag where it stands."""
    config = greedy_config(vlm, apply_chat_template=False)
    out = vlm.generate(
        templated(QUESTION + IMAGE_TAG), images=[image_tensor("orange")], generation_config=config
    )
    assert out.texts == ["orange"]


def test_vlm_pipeline_other_sizes(vlm: ov_genai.VLMPipeline) -> None:
    config = greedy_config(vlm)
    answers = [
        vlm.generate(QUESTION, images=[image_tensor("green", side)], generation_config=config).texts
        for side in (56, 96)
    ]
    assert answers == [["green"], ["green"]]


def test_continuous_batching_images_and_text_in_one_batch(
    cb: ov_genai.ContinuousBatchingPipeline,
) -> None:
    """Two image requests (different colours), a two-image one and a text-only one at once."""
    config = greedy_config(cb)
    handles = [
        cb.add_request(0, QUESTION, [image_tensor("yellow")], config),
        cb.add_request(1, QUESTION, [image_tensor("purple")], config),
        cb.add_request(2, QUESTION_TWO, [image_tensor("white"), image_tensor("orange")], config),
        cb.add_request(3, "Hello!", config),
    ]
    while cb.has_non_finished_requests():
        cb.step()
    tokenizer = cb.get_tokenizer()
    texts = [tokenizer.decode(h.read_all()[0].generated_ids) for h in handles]
    assert texts == ["yellow", "purple", "white and orange", TEXT_ONLY["Hello!"]]
