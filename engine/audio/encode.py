"""Encode synthesised speech (mono float32 samples) into what ``/v1/audio/speech`` returns.

``wav`` (16-bit PCM) and ``pcm`` (raw signed 16-bit little-endian) are written here, piece by
piece, so they stream; ``flac``, ``mp3``, ``opus`` (in Ogg) and ``aac`` (ADTS) go through
PyAV (FFmpeg) once the whole audio is there. Speed is applied by resampling (:func:`at_speed`):
cheap, and like playing a tape faster it shifts the pitch with the tempo.

Threading: pure functions, safe from any thread (call the PyAV ones off the event loop).
"""

from __future__ import annotations

import io
import struct
from typing import Any, Final, Literal

import numpy as np

SpeechFormat = Literal["wav", "mp3", "opus", "flac", "pcm", "aac"]
SPEECH_FORMATS: Final[tuple[SpeechFormat, ...]] = ("wav", "mp3", "opus", "flac", "pcm", "aac")
STREAMED_FORMATS: Final[frozenset[SpeechFormat]] = frozenset({"wav", "pcm"})
MEDIA_TYPES: Final[dict[SpeechFormat, str]] = {
    "wav": "audio/wav",
    "pcm": "audio/pcm",
    "flac": "audio/flac",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
}
# A WAV whose length is not known when its header is sent (streamed in several pieces):
# the sizes say "as long as it goes", as streaming servers write them.
_UNKNOWN = 0xFFFFFFFF

# FFmpeg's container and encoder for each compressed format.
_AV: Final[dict[SpeechFormat, tuple[str, str]]] = {
    "flac": ("flac", "flac"),
    "mp3": ("mp3", "libmp3lame"),
    "opus": ("ogg", "libopus"),
    "aac": ("adts", "aac"),
}

Samples = np.ndarray[Any, np.dtype[np.float32]]


def pcm16(samples: Samples) -> bytes:
    """Signed 16-bit little-endian PCM of float samples in [-1, 1] (clipped)."""
    clipped = np.clip(samples, -1.0, 1.0)
    return (clipped * 32767.0).round().astype("<i2").tobytes()


def wav_header(sample_rate: int, frames: int | None) -> bytes:
    """A mono 16-bit PCM WAV header; ``frames`` None for audio of a length not known yet."""
    data = _UNKNOWN if frames is None else frames * 2
    riff = _UNKNOWN if frames is None else 36 + data
    return (
        b"RIFF"
        + struct.pack("<I", riff)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
        + b"data"
        + struct.pack("<I", data)
    )


def at_speed(samples: Samples, speed: float) -> Samples:
    """``samples`` played ``speed`` times as fast (linear resampling; the pitch moves too)."""
    if speed == 1.0 or len(samples) == 0:
        return samples
    count = max(1, round(len(samples) / speed))
    positions = np.linspace(0.0, len(samples) - 1, count)
    return np.interp(positions, np.arange(len(samples)), samples).astype(np.float32)


def encode(samples: Samples, sample_rate: int, fmt: SpeechFormat) -> bytes:
    """The whole audio in ``fmt`` (wav with exact sizes, pcm, or a PyAV-encoded format)."""
    if fmt == "pcm":
        return pcm16(samples)
    if fmt == "wav":
        return wav_header(sample_rate, len(samples)) + pcm16(samples)
    return _av_encode(samples, sample_rate, fmt)


def _av_encode(samples: Samples, sample_rate: int, fmt: SpeechFormat) -> bytes:
    import av

    container_name, codec = _AV[fmt]
    out = io.BytesIO()
    with av.open(out, mode="w", format=container_name) as container:
        stream: Any = container.add_stream(codec, rate=sample_rate)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(samples, dtype=np.float32).reshape(1, -1),
            format="flt",
            layout="mono",
        )
        frame.sample_rate = sample_rate
        resampler = av.AudioResampler(
            format=stream.codec_context.format.name, layout="mono", rate=sample_rate
        )
        for converted in resampler.resample(frame):
            for packet in stream.encode(converted):
                container.mux(packet)
        for converted in resampler.resample(None):
            for packet in stream.encode(converted):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()
