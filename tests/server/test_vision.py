"""Images through every dialect on a real ``sidelight serve`` of the tiny vision model.

The fixture (``tests/fixtures/tiny-vlm``, built by ``tests/models/build_tiny_vlm_model.py``)
is a Qwen2-VL trained to answer "What colour is this?" about a solid-colour image with the
colour's name, "What colours are these?" about two with "<first> and <second>", and "Hello!"
(no image) with a fixed greeting, exactly under greedy decoding. One server for the module;
the store also holds the tiny text-only coder, which must refuse images. After each test the
worker must not have restarted (no image ever crashes it).
"""

from __future__ import annotations

import base64
import io
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest
from PIL import Image

from engine.settings import load_settings
from tests.server.harness import ServerProcess, running_server, store_ir_copy

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TINY_VLM = FIXTURES / "tiny-vlm"
TINY_CODER = FIXTURES / "tiny-coder"
VLM = "tiny-vlm"
TEXT_MODEL = "tiny-coder"
QUESTION = "What colour is this?"
GREETING = "Hello! Show me an image and I will name its colour."
COLOURS = {"red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255)}

if not (TINY_VLM / "openvino_language_model.xml").is_file():  # pragma: no cover
    pytest.skip("the tiny vision fixture is not built", allow_module_level=True)


def png(colour: str, side: int = 64) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (side, side), COLOURS[colour]).save(buffer, "PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def data_url(colour: str) -> str:
    return f"data:image/png;base64,{png(colour)}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("vision-home")
    models = load_settings({"SIDELIGHT_HOME": str(home)}).paths.models_dir
    models.mkdir(parents=True, exist_ok=True)
    store_ir_copy(models, TEXT_MODEL, TINY_CODER, task="chat", reasoning=False)
    with running_server(home, TINY_VLM) as proc:
        yield proc


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    """A client whose test fails if the engine worker restarted meanwhile (it crashed)."""
    before = server.health().json()
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        yield client
    after = server.health().json()
    assert (after["restarts"], after["worker_pid"]) == (before["restarts"], before["worker_pid"])


@pytest.fixture(scope="module")
def oai(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0) as client:
        yield client


def image_message(*colours: str, question: str = QUESTION) -> Any:
    parts: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": data_url(c), "detail": "low"}} for c in colours
    ]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": question}]}]


@pytest.mark.parametrize("colour", sorted(COLOURS))
def test_openai_chat_names_the_colour(oai: openai.OpenAI, http: httpx.Client, colour: str) -> None:
    client = oai
    whole = client.chat.completions.create(
        model=VLM, messages=image_message(colour), temperature=0, max_tokens=16
    )
    assert whole.choices[0].message.content == colour
    assert whole.choices[0].finish_reason == "stop"
    text_only = client.chat.completions.create(
        model=VLM, messages=[{"role": "user", "content": QUESTION}], temperature=0, max_tokens=16
    )
    assert whole.usage is not None and text_only.usage is not None
    # The image costs its tokens: four <|image_pad|> and the vision start and end.
    assert whole.usage.prompt_tokens == text_only.usage.prompt_tokens + 6
    stream = client.chat.completions.create(
        model=VLM, messages=image_message(colour), temperature=0, max_tokens=16, stream=True
    )
    pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert "".join(pieces) == colour


def test_two_images_in_one_message(oai: openai.OpenAI, http: httpx.Client) -> None:
    reply = oai.chat.completions.create(
        model=VLM,
        messages=image_message("red", "blue", question="What colours are these?"),
        temperature=0,
        max_tokens=16,
    )
    assert reply.choices[0].message.content == "red and blue"


def test_responses_input_image(oai: openai.OpenAI, http: httpx.Client) -> None:
    response = oai.responses.create(
        model=VLM,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_image", "image_url": data_url("green"), "detail": "auto"},
                    {"type": "input_text", "text": QUESTION},
                ],
            }
        ],
        temperature=0,
        store=False,
    )
    assert response.output_text == "green"


def test_anthropic_image_blocks_and_count_tokens(
    server: ServerProcess, http: httpx.Client, request: pytest.FixtureRequest
) -> None:
    claude = anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)
    request.addfinalizer(claude.close)
    content: list[dict[str, Any]] = [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": png("blue")},
        },
        {"type": "text", "text": QUESTION},
    ]
    messages: Any = [{"role": "user", "content": content}]
    whole = claude.messages.create(
        model=VLM, max_tokens=16, messages=messages, extra_body={"temperature": 0}
    )
    assert [b.text for b in whole.content if b.type == "text"] == ["blue"]
    events = claude.messages.create(
        model=VLM, max_tokens=16, messages=messages, stream=True, extra_body={"temperature": 0}
    )
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    assert "".join(d.text for d in deltas if d.type == "text_delta") == "blue"
    counted = claude.messages.count_tokens(model=VLM, messages=messages)
    assert counted.input_tokens == whole.usage.input_tokens
    text: Any = [{"role": "user", "content": QUESTION}]
    assert claude.messages.count_tokens(model=VLM, messages=text).input_tokens == (
        counted.input_tokens - 6
    )


def test_ollama_chat_and_generate_images(
    server: ServerProcess, http: httpx.Client, request: pytest.FixtureRequest
) -> None:
    client = ollama.Client(host=server.base_url, timeout=60)
    request.addfinalizer(client.close)
    message = {"role": "user", "content": QUESTION, "images": [png("red")]}
    chat = client.chat(VLM, messages=[message], options={"temperature": 0})
    assert chat.message.content == "red"
    streamed = client.chat(VLM, messages=[message], options={"temperature": 0}, stream=True)
    assert "".join(part.message.content or "" for part in streamed) == "red"
    generated = client.generate(VLM, QUESTION, images=[png("green")], options={"temperature": 0})
    assert generated.response == "green"
    show = client.show(VLM)
    assert "vision" in (show.capabilities or [])


def test_lmstudio_v1_image_items(http: httpx.Client) -> None:
    reply = http.post(
        "/api/v1/chat",
        json={
            "model": VLM,
            "input": [
                {"type": "image", "data_url": data_url("blue")},
                {"type": "text", "content": QUESTION},
            ],
            "temperature": 0,
            "store": False,
        },
    )
    assert reply.status_code == 200, reply.text
    assert [o["content"] for o in reply.json()["output"] if o["type"] == "message"] == ["blue"]


def test_listings_say_the_model_sees(http: httpx.Client) -> None:
    models = {m["id"]: m for m in http.get("/v1/models").json()["data"]}
    assert models[VLM].get("vision") is True and models[VLM]["task"] == "vision"
    lmstudio = {m["id"]: m for m in http.get("/api/v0/models").json()["data"]}
    assert lmstudio[VLM]["type"] == "vlm" and lmstudio[TEXT_MODEL]["type"] == "llm"
    native = {m["key"]: m for m in http.get("/api/v1/models").json()["models"]}
    assert native[VLM]["capabilities"]["vision"] is True
    assert native[TEXT_MODEL]["capabilities"]["vision"] is False


def bad(http: httpx.Client, content: list[dict[str, Any]], model: str = VLM) -> dict[str, Any]:
    response = http.post(
        "/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 4},
    )
    assert response.status_code == 400, response.text
    assert "Traceback" not in response.text
    error: dict[str, Any] = response.json()["error"]
    return error


def test_bad_images_are_400s_naming_the_part(http: httpx.Client) -> None:
    def part(url: str) -> dict[str, Any]:
        return {"type": "image_url", "image_url": {"url": url}}

    question = {"type": "text", "text": QUESTION}
    whole = base64.b64decode(png("red"))
    truncated = base64.b64encode(whole[: len(whole) // 2]).decode()
    bomb = io.BytesIO()
    Image.new("1", (5000, 5000)).save(bomb, "PNG")  # 25 MP declared, a few KB of file
    cases = [
        (part(f"data:image/png;base64,{truncated}"), "cannot be decoded"),
        (
            part("data:image/png;base64," + base64.b64encode(bomb.getvalue()).decode()),
            "larger than",
        ),
        (part("data:image/png;base64," + base64.b64encode(b"<svg/>").decode()), "not an image"),
        (part("http://169.254.169.254/latest/meta-data"), "remote image URLs are not fetched"),
    ]
    for image, words in cases:
        error = bad(http, [question, image])
        assert error["param"] == "messages.0.content.1.image_url", error
        assert words in error["message"]
    many = [part(data_url("red")) for _ in range(9)]
    error = bad(http, many)
    assert error["param"] == "messages.0.content.8.image_url" and error["code"] == "too_many_images"


def test_a_text_only_model_refuses_images_naming_one_that_sees(http: httpx.Client) -> None:
    error = bad(http, image_message("red")[0]["content"], model=TEXT_MODEL)
    assert error["code"] == "model_not_vision"
    assert error["message"] == (
        f"The model '{TEXT_MODEL}' cannot see images: it reads text only; models that can: {VLM}"
    )
    assert error["param"] == "messages.0.content.0.image_url"
    assert TEXT_MODEL not in {m["name"] for m in http.get("/api/ps").json()["models"]}


def test_a_text_stream_runs_beside_image_requests(oai: openai.OpenAI, http: httpx.Client) -> None:
    """A text-only stream and three image requests (each its own colour) on the one model
    at once: every answer exact (they share the pipeline's steps: images are batched with
    each other and with text)."""
    answers: dict[str, str] = {}

    def see(colour: str) -> None:
        reply = oai.chat.completions.create(
            model=VLM, messages=image_message(colour), temperature=0, max_tokens=16
        )
        answers[colour] = reply.choices[0].message.content or ""

    with oai.chat.completions.create(
        model=VLM,
        messages=[{"role": "user", "content": "Hello!"}],
        temperature=0,
        max_tokens=32,
        stream=True,
    ) as stream:
        chunks = iter(stream)
        first = next(chunks)  # the stream is running before the image requests start
        seeing = [threading.Thread(target=see, args=(colour,)) for colour in sorted(COLOURS)]
        for thread in seeing:
            thread.start()
        text = (first.choices[0].delta.content or "") if first.choices else ""
        text += "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        for thread in seeing:
            thread.join(60)
    assert text == GREETING
    assert answers == {colour: colour for colour in COLOURS}
