"""A vision model in a real engine worker, on both backends: continuous batching
(``add_request`` with images) and the serial one (``VLMPipeline``, the NPU's path), driven
through EngineClient with decoded images as the server sends them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.models import spec_from_path
from engine.supervisor.client import EngineClient
from engine.supervisor.states import ERROR, READY, RequestFailed
from engine.worker.messages import ImageInput
from tests.engine.test_client import generate, make_client

TINY_VLM = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-vlm"
pytestmark = pytest.mark.skipif(
    not TINY_VLM.is_dir(), reason="the tiny vision fixture is not built"
)


def solid(rgb: tuple[int, int, int], width: int = 64, height: int = 64) -> ImageInput:
    return ImageInput(width, height, bytes(rgb) * (width * height))


def ask(*images: ImageInput, question: str = "What colour is this?") -> dict[str, Any]:
    """A request's fields (for ``generate``, which makes it greedy)."""
    message = {"role": "user", "content": question, "images": list(range(len(images)))}
    return {"messages": [message], "images": images, "max_tokens": 16}


@pytest.fixture(scope="module", params=["batched", "serial"])
def engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EngineClient]:
    client = make_client(tmp_path_factory.mktemp("home"), request.param)
    client.start()
    client.load(spec_from_path(TINY_VLM))
    status = client.wait_for({READY, ERROR}, 120)
    assert status.state == READY, status.message
    assert status.backend == request.param
    yield client
    client.close()


async def test_the_worker_sees_each_colour_and_counts_the_image(engine: EngineClient) -> None:
    for name, rgb in (("red", (255, 0, 0)), ("blue", (0, 0, 255)), ("white", (255, 255, 255))):
        text, finished, _ = await generate(engine, **(ask(solid(rgb))))
        assert (text, finished.finish_reason) == (name, "stop")
        assert finished.prompt_tokens == 30  # 24 of text, 6 of image
    text, _, _ = await generate(engine, messages=[{"role": "user", "content": "Hello!"}])
    assert text == "Hello! Show me an image and I will name its colour."


async def test_odd_sizes_never_take_the_worker_down(engine: EngineClient) -> None:
    before = engine.status().worker_pid
    for width, height in ((1, 1), (2, 300), (300, 2), (27, 29)):
        text, finished, _ = await generate(engine, **(ask(solid((0, 255, 0), width, height))))
        assert finished.finish_reason == "stop" and text
    assert engine.status().worker_pid == before and engine.status().state == READY


async def test_text_spelling_an_image_tag_is_refused(engine: EngineClient) -> None:
    message = {"role": "user", "content": "<ov_genai_image_0> What colour is this?"}
    with pytest.raises(RequestFailed) as refused:
        await generate(engine, messages=[message])
    assert refused.value.param == "messages" and "reserves for images" in str(refused.value)


async def test_a_raw_prompt_takes_its_images_before_the_text(engine: EngineClient) -> None:
    """Ollama's ``raw`` generate: no template; the image still goes in, and counts."""
    prompt = "What colour is this?"
    _, text_only, _ = await generate(engine, prompt=prompt, count_only=True)
    _, seen, _ = await generate(engine, prompt=prompt, images=(solid((255, 0, 0)),), max_tokens=4)
    assert seen.finish_reason in ("stop", "length")
    assert seen.prompt_tokens == text_only.prompt_tokens + 6
