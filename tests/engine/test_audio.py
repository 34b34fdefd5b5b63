"""The audio helpers on their own: container sniffing, decoding and resampling (PyAV),
windows and the joining of their texts, SubRip/WebVTT, the form's field checks, and how a
Whisper IR folder is recognised and checked."""

from __future__ import annotations

import io
import itertools
import json
import math
import shutil
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.audio.decode import SAMPLE_RATE, AudioError, AudioTooLong, decode, sniff
from engine.audio.subtitles import Segment, srt, vtt
from engine.audio.windows import Window, is_silent, join_texts, windows
from engine.models import ModelError, spec_from_path, verify_files
from engine.server.audio.protocol import check_content_type, parse_fields
from engine.server.errors import APIError
from engine.supervisor.kinds import kind_of

AUDIO = Path(__file__).resolve().parents[1] / "fixtures" / "audio"
FACTS: dict[str, Any] = json.loads((AUDIO / "transcripts.json").read_text())


def _sine_wav(rate: int, channels: int, seconds: float) -> bytes:
    """A 440 Hz tone, 16-bit PCM, the same in every channel."""
    count = int(rate * seconds)
    tone = (np.sin(2 * math.pi * 440 * np.arange(count) / rate) * 16000).astype("<i2")
    frames = np.repeat(tone, channels).tobytes()
    out = io.BytesIO()
    with wave.open(out, "wb") as clip:
        clip.setnchannels(channels)
        clip.setsampwidth(2)
        clip.setframerate(rate)
        clip.writeframes(frames)
    return out.getvalue()


# ---- sniffing and decoding -----------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "container"),
    [
        (b"RIFF\x00\x00\x00\x00WAVEfmt ", "wav"),
        (b"fLaC\x00\x00\x00\x22", "flac"),
        (b"OggS\x00\x02", "ogg"),
        (b"\x1a\x45\xdf\xa3\x01", "matroska"),
        (b"\x00\x00\x00\x20ftypM4A ", "mov"),
        (b"ID3\x04\x00", "mp3"),
        (b"\xff\xfb\x90\x00", "mp3"),
        (b"\xff\xf1\x50\x80", "aac"),
        (b"#EXTM3U\nhttp://x/a.ts", None),
        (b"ffconcat version 1.0", None),
        (b"", None),
    ],
)
def test_sniff_names_the_container_or_none(head: bytes, container: str | None) -> None:
    assert sniff(head) == container


def test_a_wav_clip_decodes_to_its_length_in_float32() -> None:
    samples = decode((AUDIO / "hello.wav").read_bytes(), 60)
    assert samples.dtype == np.float32
    assert len(samples) == pytest.approx(FACTS["seconds"]["hello"] * SAMPLE_RATE, abs=16)
    assert 0.05 < float(np.max(np.abs(samples))) <= 1.0


@pytest.mark.parametrize("converted", sorted(FACTS["converted"]))
def test_compressed_copies_decode_like_the_wav(converted: str) -> None:
    original = decode((AUDIO / f"{FACTS['converted'][converted]}.wav").read_bytes(), 60)
    copy = decode((AUDIO / converted).read_bytes(), 60)
    assert len(copy) / len(original) == pytest.approx(1.0, abs=0.1)  # codec padding
    rms = [float(np.sqrt(np.mean(x**2))) for x in (original, copy)]
    assert rms[1] / rms[0] == pytest.approx(1.0, abs=0.2)


def test_stereo_44k_is_resampled_to_16k_mono() -> None:
    samples = decode(_sine_wav(44100, 2, 1.0), 60)
    assert len(samples) == pytest.approx(SAMPLE_RATE, abs=64)
    # still a 440 Hz tone: the spectrum peaks there
    spectrum = np.abs(np.fft.rfft(samples[:SAMPLE_RATE]))
    peak = int(np.argmax(spectrum)) * SAMPLE_RATE / (2 * (len(spectrum) - 1))
    assert peak == pytest.approx(440, abs=5)


@pytest.mark.parametrize(
    "data",
    [
        b"not audio",
        b"RIFF\x10\x00\x00\x00WAVEjunkjunkjunk",
        b"OggS" + b"\x00" * 200,
        b"ID3" + b"\xff" * 300,
        b"fLaC" + bytes(range(256)) * 4,
    ],
)
def test_undecodable_data_is_an_audio_error(data: bytes) -> None:
    with pytest.raises(AudioError):
        decode(data, 60)


def test_audio_past_the_duration_limit_is_refused() -> None:
    with pytest.raises(AudioTooLong, match=r"0\.5 seconds"):
        decode(_sine_wav(16000, 1, 1.0), 0.5)


# ---- windows -------------------------------------------------------------------------


def test_windows_cover_the_audio_with_overlap() -> None:
    assert windows(0) == []
    assert windows(16000) == [Window(0, 16000)]
    parts = windows(65 * SAMPLE_RATE)
    assert parts[0] == Window(0, 30 * SAMPLE_RATE)
    assert parts[1].start == 28 * SAMPLE_RATE  # 2 s overlap
    assert parts[-1].end == 65 * SAMPLE_RATE
    assert all(w.end - w.start <= 30 * SAMPLE_RATE for w in parts)
    assert all(a.end > b.start for a, b in itertools.pairwise(parts))


def test_silence_is_below_the_peak() -> None:
    assert is_silent(np.zeros(100, dtype=np.float32))
    assert is_silent(np.full(100, 5e-4, dtype=np.float32))
    assert not is_silent(np.array([0.0, 0.2], dtype=np.float32))
    assert is_silent(np.zeros(0, dtype=np.float32))


@pytest.mark.parametrize(
    ("before", "after", "joined"),
    [
        ("", "Hello world.", "Hello world."),
        ("Hello world.", "", "Hello world."),
        ("We walked along the", "the river.", "We walked along the river."),
        ("Turn left at the next", "at the next light.", "Turn left at the next light."),
        ("One two.", "Three four.", "One two. Three four."),
        ("A cat.", "Cat sat.", "A cat. sat."),
    ],
)
def test_join_texts_says_the_overlap_once(before: str, after: str, joined: str) -> None:
    assert join_texts(before, after) == joined


# ---- subtitles -----------------------------------------------------------------------


def test_srt_and_vtt() -> None:
    segments = [Segment(0.0, 1.5, " Hello world."), Segment(61.25, 3725.004, "Bye.")]
    assert srt(segments) == (
        "1\n00:00:00,000 --> 00:00:01,500\nHello world.\n\n2\n00:01:01,250 --> 01:02:05,004\nBye.\n"
    )
    assert vtt(segments) == (
        "WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nHello world.\n\n"
        "00:01:01.250 --> 01:02:05.004\nBye.\n"
    )
    assert srt([]) == "" and vtt([]) == "WEBVTT\n\n"


# ---- the form's fields ---------------------------------------------------------------


def _param(fields: list[tuple[str, Any]]) -> str | None:
    with pytest.raises(APIError) as caught:
        parse_fields("transcribe", fields)
    assert caught.value.status == 400
    return caught.value.param


def test_fields_are_read_with_defaults() -> None:
    request = parse_fields("translate", [("model", " tiny-whisper "), ("file", object())])
    assert (request.task, request.model, request.response_format) == (
        "translate",
        "tiny-whisper",
        "json",
    )
    assert (request.language, request.prompt, request.temperature, request.stream) == (
        None,
        None,
        0.0,
        False,
    )
    full = parse_fields(
        "transcribe",
        [
            ("model", "m"),
            ("language", "EN"),
            ("prompt", "Sidelight"),
            ("temperature", "0.4"),
            ("response_format", "verbose_json"),
            ("timestamp_granularities[]", "segment"),
            ("include[]", "logprobs"),
        ],
    )
    assert (full.language, full.prompt, full.temperature, full.timestamps) == (
        "en",
        "Sidelight",
        0.4,
        True,
    )


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ([], "model"),
        ([("model", "a"), ("model", "b")], "model"),
        ([("model", "m" * 257)], "model"),
        ([("model", "m"), ("response_format", "xml")], "response_format"),
        ([("model", "m"), ("temperature", "nan")], "temperature"),
        ([("model", "m"), ("temperature", "-0.1")], "temperature"),
        ([("model", "m"), ("language", "english")], "language"),
        ([("model", "m"), ("stream", "yes")], "stream"),
        ([("model", "m"), ("stream", "true"), ("response_format", "vtt")], "stream"),
        ([("model", "m"), ("timestamp_granularities[]", "segment")], "timestamp_granularities[]"),
        ([("model", "m"), ("prompt", "x" * 1001)], "prompt"),
        ([("model", object())], "model"),
    ],
)
def test_bad_fields_name_themselves(fields: list[tuple[str, Any]], param: str) -> None:
    assert _param(fields) == param


@pytest.mark.parametrize("kind", ["text/plain", "image/png", "application/json; charset=utf-8"])
def test_a_file_that_says_it_is_not_audio_is_refused(kind: str) -> None:
    with pytest.raises(APIError) as caught:
        check_content_type(kind)
    assert caught.value.param == "file"


@pytest.mark.parametrize("kind", [None, "", "audio/wav", "video/webm", "application/octet-stream"])
def test_audio_content_types_pass(kind: str | None) -> None:
    check_content_type(kind)


# ---- the model folder ----------------------------------------------------------------

TINY_WHISPER = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-whisper"


def test_a_whisper_folder_is_a_transcription_model() -> None:
    spec = spec_from_path(TINY_WHISPER)
    assert (spec.task, spec.architecture, spec.format, spec.context_length) == (
        "transcription",
        "whisper",
        "ir",
        448,
    )
    assert kind_of(spec.task).loads_at_start is False
    verify_files(spec)


def test_a_whisper_folder_without_its_decoder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "broken-whisper"
    shutil.copytree(TINY_WHISPER, folder)
    (folder / "openvino_decoder_model.xml").unlink()
    with pytest.raises(ModelError, match=r"openvino_decoder_model\.xml"):
        spec_from_path(folder)


def test_a_cut_decoder_is_damage_named_by_file(tmp_path: Path) -> None:
    folder = tmp_path / "cut-whisper"
    shutil.copytree(TINY_WHISPER, folder)
    weights = folder / "openvino_decoder_model.bin"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(ModelError, match=r"openvino_decoder_model\.bin is cut short"):
        verify_files(spec_from_path(folder))


@pytest.mark.parametrize("name", ["hello.wav", "hello.mp3", "cat.ogg"])
def test_damaged_uploads_decode_or_are_refused_never_worse(name: str) -> None:
    """Cut short or with seeded bytes overwritten, a file decodes or is an AudioError."""
    data = (AUDIO / name).read_bytes()
    rng = np.random.default_rng(20261202)
    variants = [data[:cut] for cut in (8, 40, 200, len(data) // 2)]
    for _ in range(6):
        damaged = bytearray(data)
        for position in rng.integers(0, len(data), size=64):
            damaged[int(position)] = int(rng.integers(0, 256))
        variants.append(bytes(damaged))
    for variant in variants:
        try:
            samples = decode(variant, 60)
        except AudioError:
            continue
        assert samples.dtype == np.float32
        assert bool(np.all(np.abs(samples) <= 1.0))


def test_sidelight_convert_exports_whisper_for_speech_recognition(tmp_path: Path) -> None:
    from engine.store.convert import ConvertRequest, _task

    (tmp_path / "config.json").write_text(
        json.dumps({"architectures": ["WhisperForConditionalGeneration"], "model_type": "whisper"})
    )
    assert _task(ConvertRequest(str(tmp_path)), None, None) == (
        "automatic-speech-recognition-with-past"
    )
