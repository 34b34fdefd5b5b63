"""An image's prompt tokens as the worker counts them (engine.worker.vision) are the ones
GenAI's own Qwen2-VL preprocessing gives, for ordinary and extreme sizes (the tiny fixture)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov
import openvino_genai as ov_genai
import pytest

from engine.worker.vision import image_token_counter

TINY_VLM = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-vlm"
SIZES = [(1, 1), (27, 29), (2, 300), (300, 2), (64, 64), (100, 60), (333, 777), (1000, 1000)]


@pytest.mark.skipif(not TINY_VLM.is_dir(), reason="the tiny vision fixture is not built")
def test_image_tokens_match_genai() -> None:
    pipe = ov_genai.VLMPipeline(str(TINY_VLM), "CPU")
    config = ov_genai.GenerationConfig()
    config.max_new_tokens = 1

    def input_tokens(images: list[ov.Tensor]) -> int:
        result = pipe.generate("What colour is this?", images=images, generation_config=config)
        return int(result.perf_metrics.get_num_input_tokens())

    text_only = input_tokens([])
    count = image_token_counter(TINY_VLM)
    for width, height in SIZES:
        image = ov.Tensor(np.zeros((1, height, width, 3), dtype=np.uint8))
        assert input_tokens([image]) - text_only == count(width, height), (width, height)
