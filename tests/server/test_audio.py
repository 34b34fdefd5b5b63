"""``POST /v1/audio/transcriptions`` and ``/v1/audio/translations`` on a real
``sidelight serve``, through the ``openai`` SDK.

The server chats with the demo model; the store holds the tiny Whisper
(``tests/fixtures/tiny-whisper``), trained until it transcribes the clips in
``tests/fixtures/audio`` exactly (``transcripts.json``). Every response format, streaming,
the MP3 and Ogg copies, long audio (more than one window) and silence are transcribed; bad
requests are 400s naming the field. The server runs with small upload limits so the
oversize cases stay cheap. After each test the worker must not have restarted.
"""

from __future__ import annotations

import io
import json
import warnings
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.server.harness import ServerProcess, running_server, store_speech_model

pytestmark = pytest.mark.slow

AUDIO = Path(__file__).resolve().parents[1] / "fixtures" / "audio"
FACTS: dict[str, Any] = json.loads((AUDIO / "transcripts.json").read_text())
TRANSCRIPTS: dict[str, str] = FACTS["transcripts"]
WHISPER = "tiny-whisper"
DEMO = "sidelight-demo"
MAX_BYTES = 1_500_000
MAX_SECONDS = 60


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("audio-home")
    store_speech_model(home)
    env = {
        "SIDELIGHT_MAX_AUDIO_BYTES": str(MAX_BYTES),
        "SIDELIGHT_MAX_AUDIO_SECONDS": str(MAX_SECONDS),
    }
    with running_server(home, tiny_model, env=env) as proc:
        yield proc


@pytest.fixture
def client(server: ServerProcess) -> Iterator[openai.OpenAI]:
    """An SDK client whose test fails if the engine worker restarted meanwhile."""
    health = server.health().json()
    yield openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)
    after = server.health().json()
    assert (after["restarts"], after["worker_pid"]) == (health["restarts"], health["worker_pid"])


def _wav(samples: bytes, rate: int = 16000, width: int = 2) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as clip:
        clip.setnchannels(1)
        clip.setsampwidth(width)
        clip.setframerate(rate)
        clip.writeframes(samples)
    return out.getvalue()


def _frames(name: str) -> bytes:
    with wave.open(str(AUDIO / f"{name}.wav")) as clip:
        frames: bytes = clip.readframes(clip.getnframes())
    return frames


def refused(response: httpx.Response, status: int = 400) -> str | None:
    """The param of an error answer (OpenAI's shape)."""
    assert response.status_code == status, response.text
    assert "Traceback" not in response.text
    param: str | None = response.json()["error"]["param"]
    return param


def post(server: ServerProcess, files: Any = None, **fields: Any) -> httpx.Response:
    data = {"model": WHISPER, **fields}
    return httpx.post(
        f"{server.base_url}/v1/audio/transcriptions", data=data, files=files, timeout=60
    )


# ---- transcripts ---------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(TRANSCRIPTS))
def test_each_clip_is_transcribed_exactly(client: openai.OpenAI, name: str) -> None:
    with (AUDIO / f"{name}.wav").open("rb") as clip:
        result = client.audio.transcriptions.create(model=WHISPER, file=clip)
    assert result.text == TRANSCRIPTS[name]


def test_text_srt_and_vtt_formats(client: openai.OpenAI) -> None:
    expected = TRANSCRIPTS["cat"]
    clip = (AUDIO / "cat.wav").read_bytes()
    text = client.audio.transcriptions.create(
        model=WHISPER, file=("cat.wav", clip), response_format="text", language="en"
    )
    assert text.strip() == expected
    srt = client.audio.transcriptions.create(
        model=WHISPER, file=("cat.wav", clip), response_format="srt"
    )
    lines = srt.strip().splitlines()
    assert lines[0] == "1" and lines[2] == expected, srt
    assert lines[1].startswith("00:00:00,000 --> 00:00:0"), srt
    vtt = client.audio.transcriptions.create(
        model=WHISPER, file=("cat.wav", clip), response_format="vtt"
    )
    cues = vtt.strip().splitlines()
    assert cues[0] == "WEBVTT" and cues[3] == expected, vtt
    assert cues[2].startswith("00:00:00.000 --> 00:00:0"), vtt


def test_verbose_json_has_the_segment_language_and_duration(client: openai.OpenAI) -> None:
    with (AUDIO / "light.wav").open("rb") as clip:
        result = client.audio.transcriptions.create(
            model=WHISPER,
            file=clip,
            response_format="verbose_json",
            timestamp_granularities=["segment"],
        )
    assert result.text == TRANSCRIPTS["light"]
    assert result.language == "english"
    assert result.duration == pytest.approx(FACTS["seconds"]["light"], abs=0.01)
    segments = result.segments or []
    assert [s.text.strip() for s in segments] == [TRANSCRIPTS["light"]]
    assert segments[0].start == 0.0
    assert 0.0 < segments[0].end <= result.duration + 0.02


def test_translation_of_english_is_the_same_text(client: openai.OpenAI) -> None:
    # The SDK marks translations deprecated (OpenAI's newer models do not translate).
    with (AUDIO / "report.wav").open("rb") as clip, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        result = client.audio.translations.create(model=WHISPER, file=clip)
    assert result.text == TRANSCRIPTS["report"]


def test_streamed_transcript(client: openai.OpenAI) -> None:
    with (AUDIO / "river.wav").open("rb") as clip:
        stream = client.audio.transcriptions.create(model=WHISPER, file=clip, stream=True)
        events = list(stream)
    deltas = [e.delta for e in events if e.type == "transcript.text.delta"]
    done = [e for e in events if e.type == "transcript.text.done"]
    assert "".join(deltas) == TRANSCRIPTS["river"]
    assert len(done) == 1 and done[0].text == TRANSCRIPTS["river"]
    assert events[-1].type == "transcript.text.done"


@pytest.mark.parametrize("converted", sorted(FACTS["converted"]))
def test_mp3_and_ogg_uploads(client: openai.OpenAI, converted: str) -> None:
    with (AUDIO / converted).open("rb") as clip:
        result = client.audio.transcriptions.create(model=WHISPER, file=clip)
    assert result.text == TRANSCRIPTS[FACTS["converted"][converted]]


def test_silence_is_an_empty_text(client: openai.OpenAI) -> None:
    with (AUDIO / FACTS["silence"]).open("rb") as clip:
        result = client.audio.transcriptions.create(model=WHISPER, file=clip)
    assert result.text == ""


def test_long_audio_is_cut_into_windows(client: openai.OpenAI) -> None:
    """A clip then 38 s of silence: two windows, the second silent (never sent)."""
    frames = _frames("hello") + bytes(2 * 16000 * 38)
    result = client.audio.transcriptions.create(
        model=WHISPER, file=("long.wav", _wav(frames)), response_format="verbose_json"
    )
    assert result.text == TRANSCRIPTS["hello"]
    assert result.duration > 30


# ---- refusals ------------------------------------------------------------------------


def test_a_corrupt_file_is_a_400_naming_file(server: ServerProcess) -> None:
    broken = (AUDIO / "hello.wav").read_bytes()[:44] + b"\x07" * 7
    assert refused(post(server, {"file": ("x.wav", b"not audio at all", "audio/wav")})) == "file"
    assert refused(post(server, {"file": ("x.mp3", b"ID3" + b"\xff" * 500)})) == "file"
    response = post(server, {"file": ("x.wav", broken, "audio/wav")})
    if response.status_code == 200:  # a header with no samples after it is silence
        assert response.json()["text"] == ""
    else:
        assert refused(response) == "file"


def test_wrong_content_types_are_400s_naming_file(server: ServerProcess) -> None:
    clip = (AUDIO / "hello.wav").read_bytes()
    assert refused(post(server, {"file": ("x.txt", clip, "text/plain")})) == "file"
    as_json = httpx.post(
        f"{server.base_url}/v1/audio/transcriptions", json={"model": WHISPER}, timeout=30
    )
    assert refused(as_json) == "file"
    assert refused(post(server)) == "file"  # a form with no file


def test_oversize_and_overlong_files_are_400s_naming_file(server: ServerProcess) -> None:
    big = _wav(bytes(MAX_BYTES))
    assert refused(post(server, {"file": ("big.wav", big)})) == "file"
    # 61 s of 8 kHz 8-bit audio: small in bytes, too long once decoded
    long = _wav(bytes([128]) * 8000 * (MAX_SECONDS + 1), rate=8000, width=1)
    assert len(long) < MAX_BYTES
    response = post(server, {"file": ("long.wav", long)})
    assert refused(response) == "file"
    assert "seconds" in response.json()["error"]["message"]


def test_model_field_refusals(server: ServerProcess) -> None:
    clip = {"file": ("hello.wav", (AUDIO / "hello.wav").read_bytes())}
    assert refused(post(server, clip, model="")) == "model"
    assert refused(post(server, clip, model=DEMO)) == "model"  # a chat model
    assert refused(post(server, clip, model="no-such-model"), 404) == "model"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("response_format", "mp3"),
        ("temperature", "2"),
        ("temperature", "warm"),
        ("language", "xx"),
        ("language", "yue"),  # Whisper knows it, this model does not: the worker says so
        ("stream", "maybe"),
        ("timestamp_granularities[]", "word"),
        ("prompt", "p" * 1001),
    ],
)
def test_bad_fields_are_400s_naming_them(server: ServerProcess, field: str, value: str) -> None:
    clip = {"file": ("hello.wav", (AUDIO / "hello.wav").read_bytes())}
    fields = {field: value}
    if field == "timestamp_granularities[]":
        fields["response_format"] = "verbose_json"
    assert refused(post(server, clip, **fields)) == field


def test_stream_with_subtitles_is_refused(server: ServerProcess) -> None:
    clip = {"file": ("hello.wav", (AUDIO / "hello.wav").read_bytes())}
    assert refused(post(server, clip, stream="true", response_format="srt")) == "stream"


def test_the_cross_site_guard_lets_uploads_through_only_where_they_belong(
    server: ServerProcess,
) -> None:
    """Multipart is accepted on the audio paths alone, and never from a browser elsewhere."""
    clip = {"file": ("hello.wav", (AUDIO / "hello.wav").read_bytes())}
    url = f"{server.base_url}/v1/audio/transcriptions"
    data = {"model": WHISPER}
    marked = httpx.post(url, data=data, files=clip, headers={"sec-fetch-site": "cross-site"})
    assert marked.status_code == 415, marked.text
    evil = httpx.post(url, data=data, files=clip, headers={"origin": "https://evil.example"})
    assert evil.status_code == 403, evil.text
    local = httpx.post(url, data=data, files=clip, headers={"origin": "http://localhost:5173"})
    assert local.status_code == 200 and local.json()["text"] == TRANSCRIPTS["hello"]
    chat = httpx.post(f"{server.base_url}/v1/chat/completions", data=data, files=clip)
    assert chat.status_code == 415, chat.text


def test_prompt_and_temperature_reach_the_model(client: openai.OpenAI) -> None:
    """The tiny model was never trained with a prompt or sampling: these only have to run
    (a 200 with text), and the greedy answer must stay exact."""
    with (AUDIO / "hello.wav").open("rb") as clip:
        prompted = client.audio.transcriptions.create(
            model=WHISPER, file=clip, prompt="Sidelight, OpenVINO.", language="en"
        )
    assert isinstance(prompted.text, str)
    with (AUDIO / "hello.wav").open("rb") as clip:
        sampled = client.audio.transcriptions.create(model=WHISPER, file=clip, temperature=0.5)
    assert isinstance(sampled.text, str)
    with (AUDIO / "hello.wav").open("rb") as clip:
        greedy = client.audio.transcriptions.create(model=WHISPER, file=clip, temperature=0)
    assert greedy.text == TRANSCRIPTS["hello"]
