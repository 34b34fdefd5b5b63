"""``POST /v1/audio/speech`` on a real ``sidelight serve``, through the ``openai`` SDK.

The server chats with the demo model; the store holds the tiny random SpeechT5
(``tests/fixtures/tiny-speecht5``) and the tiny Whisper. The SpeechT5's stop head is zeroed,
so it speaks ``5120 * (characters + 2)`` samples at 16 kHz for a piece of text (GenAI's
``maxlenratio`` of 20 frames a token, 256 samples a frame, reduction 2): every format must
decode to exactly that many (AAC and Opus pad or resample, so only decodability is checked
for them). Its weights are random, so the audio is noise: no round trip through Whisper.
After each test the worker must not have restarted.
"""

from __future__ import annotations

import io
import json
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import httpx
import openai
import pytest

from engine.audio.pieces import pieces
from tests.server.harness import (
    ServerProcess,
    running_server,
    store_speech_model,
    store_text_speech_model,
)

pytestmark = pytest.mark.slow

TTS = "tiny-speecht5"
WHISPER = "tiny-whisper"
DEMO = "sidelight-demo"
RATE = 16000


def expected(text: str) -> int:
    """The samples the fixture speaks for ``text`` (see the module docstring)."""
    return sum(5120 * (len(piece) + 2) for piece in pieces(text))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("speech-home")
    store_text_speech_model(home)
    store_speech_model(home)
    with running_server(home, tiny_model) as proc:
        yield proc


@pytest.fixture
def client(server: ServerProcess) -> Iterator[openai.OpenAI]:
    """An SDK client whose test fails if the engine worker restarted meanwhile."""
    health = server.health().json()
    yield openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)
    after = server.health().json()
    assert (after["restarts"], after["worker_pid"]) == (health["restarts"], health["worker_pid"])


def _speak(client: openai.OpenAI, fmt: Any, text: str = "hello world", **extra: Any) -> bytes:
    response = client.audio.speech.create(
        model=TTS, voice="alloy", input=text, response_format=fmt, **extra
    )
    return response.content


def _decoded(data: bytes) -> tuple[int, int, int]:
    """Samples, sample rate and channels of ``data`` as PyAV decodes it."""
    with av.open(io.BytesIO(data)) as container:
        count, rate, channels = 0, 0, 0
        for frame in container.decode(audio=0):
            count += frame.samples
            rate, channels = frame.sample_rate, frame.layout.nb_channels
    return count, rate, channels


def test_wav_is_16_bit_mono_16khz_of_the_expected_length(client: openai.OpenAI) -> None:
    data = _speak(client, "wav")
    with wave.open(io.BytesIO(data)) as clip:
        assert (clip.getnchannels(), clip.getsampwidth(), clip.getframerate()) == (1, 2, RATE)
        assert clip.getnframes() == expected("hello world") == 66560
        assert len(clip.readframes(clip.getnframes())) == 2 * 66560


def test_pcm_is_raw_s16le_of_the_expected_length(client: openai.OpenAI) -> None:
    assert len(_speak(client, "pcm")) == 2 * expected("hello world")


@pytest.mark.parametrize("fmt", ["flac", "mp3"])
def test_compressed_formats_decode_to_the_expected_length(client: openai.OpenAI, fmt: str) -> None:
    assert _decoded(_speak(client, fmt)) == (expected("hello world"), RATE, 1)


@pytest.mark.parametrize("fmt", ["opus", "aac"])
def test_opus_and_aac_decode_to_mono_audio(client: openai.OpenAI, fmt: str) -> None:
    count, rate, channels = _decoded(_speak(client, fmt))
    assert channels == 1
    # Opus decodes at 48 kHz; AAC adds its encoder's padding: at least the whole speech.
    assert count >= expected("hello world") * rate // RATE


def test_speed_resamples_the_audio(client: openai.OpenAI) -> None:
    assert len(_speak(client, "pcm", speed=2.0)) == 2 * (expected("hello world") // 2)


def test_long_input_is_spoken_in_pieces_and_streamed(server: ServerProcess) -> None:
    text = "hello world " * 20
    assert len(pieces(text)) == 2
    body = {"model": TTS, "voice": "echo", "input": text, "response_format": "wav"}
    with httpx.stream("POST", f"{server.base_url}/v1/audio/speech", json=body, timeout=60) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"] == "audio/wav"
        assert r.headers.get("transfer-encoding") == "chunked"
        data = r.read()
    assert data[40:44] == b"\xff\xff\xff\xff"  # a streamed WAV: the length is not known ahead
    assert len(data) - 44 == 2 * expected(text)


def test_long_input_in_a_compressed_format_is_every_piece(client: openai.OpenAI) -> None:
    text = "the cat sat on the mat. " * 8
    assert len(pieces(text)) == 2
    assert _decoded(_speak(client, "flac", text)) == (expected(text), RATE, 1)


def refused(server: ServerProcess, **fields: Any) -> str | None:
    """The param of the 400 a speech request with ``fields`` gets."""
    body = {"model": TTS, "voice": "alloy", "input": "hello world", **fields}
    body = {k: v for k, v in body.items() if v is not None}
    response = httpx.post(  # json.dumps escapes a lone surrogate, as a client's JSON may
        f"{server.base_url}/v1/audio/speech",
        content=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert response.status_code == 400, response.text
    assert "Traceback" not in response.text
    param: str | None = response.json()["error"]["param"]
    return param


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("input", ""),
        ("input", "   "),
        ("input", "a" * 4097),
        ("input", 5),
        ("input", "hello \ud800 world"),
        ("voice", "darth"),
        ("voice", 3),
        ("response_format", "ogg"),
        ("speed", 0.1),
        ("speed", 5),
        ("speed", "fast"),
        ("instructions", 7),
        ("stream_format", "sse"),
        ("model", ""),
    ],
)
def test_bad_fields_are_400s_naming_them(server: ServerProcess, field: str, value: Any) -> None:
    assert refused(server, **{field: value}) == field


def test_missing_fields_are_400s_naming_them(server: ServerProcess) -> None:
    assert refused(server, input=None) == "input"
    assert refused(server, voice=None) == "voice"


@pytest.mark.parametrize("model", [DEMO, WHISPER])
def test_a_model_that_does_not_speak_is_a_400_naming_model(
    server: ServerProcess, model: str
) -> None:
    assert refused(server, model=model) == "model"


def test_a_body_that_is_not_json_is_a_400(server: ServerProcess) -> None:
    response = httpx.post(f"{server.base_url}/v1/audio/speech", content=b"{nope", timeout=60)
    assert response.status_code == 400, response.text


def test_the_model_is_listed_and_claims_no_ollama_capability(server: ServerProcess) -> None:
    listed = httpx.get(f"{server.base_url}/v1/models", timeout=30).json()
    assert TTS in [model["id"] for model in listed["data"]]
    shown = httpx.post(f"{server.base_url}/api/show", json={"model": TTS}, timeout=30)
    assert shown.status_code == 200, shown.text
    assert shown.json()["capabilities"] == []
