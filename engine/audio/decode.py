"""Decode an uploaded audio file to 16 kHz mono float32 samples in [-1, 1] (PyAV, FFmpeg).

What people upload: WAV, MP3, M4A/AAC (an MP4 container or ADTS), Ogg (Vorbis, Opus, FLAC),
WebM/Matroska, FLAC. The container is recognised by its first bytes here (:func:`sniff`)
and FFmpeg is told which demuxer to use: left to probe, FFmpeg would also accept playlists
and concatenation scripts (HLS, ``concat``) that open other files and URLs, which an upload
must never make the server do.

Decoding stops as soon as the audio passes ``max_seconds``: a few megabytes of a low
bit-rate file can hold hours, and the decoded samples (64 KB a second) must stay within a
budget.

Threading: pure functions, safe from any thread (call them off the event loop: decoding a
long file takes a while).
"""

from __future__ import annotations

import io
import logging
from typing import Any, Literal

import numpy as np

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000

Container = Literal["wav", "mp3", "mov", "aac", "ogg", "matroska", "flac"]
"""FFmpeg's demuxer for each container an upload may be in (``mov`` reads MP4 and M4A)."""


class AudioError(ValueError):
    """The upload is not audio Sidelight can decode; the message says why."""


class AudioTooLong(AudioError):
    """The audio lasts longer than the limit."""


# (offset, magic bytes, container): how each container's files begin.
_MAGIC: tuple[tuple[int, bytes, Container], ...] = (
    (0, b"fLaC", "flac"),
    (0, b"OggS", "ogg"),
    (0, b"\x1a\x45\xdf\xa3", "matroska"),  # EBML: WebM and Matroska
    (4, b"ftyp", "mov"),  # ISO base media: MP4, M4A
    (0, b"ID3", "mp3"),  # an ID3v2 tag before MPEG frames
)


def sniff(data: bytes) -> Container | None:
    """The container ``data`` is in, from its first bytes; None when it is none we read."""
    head = data[:16]
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "wav"
    for offset, magic, container in _MAGIC:
        if head[offset : offset + len(magic)] == magic:
            return container
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0:
        # An MPEG audio frame; layer bits 00 are AAC's ADTS header.
        return "aac" if head[1] & 0x06 == 0 else "mp3"
    return None


def decode(data: bytes, max_seconds: float) -> np.ndarray[Any, np.dtype[np.float32]]:
    """The first audio stream of ``data``, mixed to mono and resampled to 16 kHz.

    Raises:
        AudioError: not a container we read, no audio stream, or undecodable.
        AudioTooLong: the audio lasts longer than ``max_seconds``.
    """
    import av

    container_name = sniff(data)
    if container_name is None:
        raise AudioError(
            "the file is not audio in a format Sidelight reads "
            "(wav, mp3, m4a, aac, ogg, opus, webm, flac)"
        )
    limit = int(max_seconds * SAMPLE_RATE)
    parts: list[np.ndarray[Any, np.dtype[np.float32]]] = []
    total = 0
    try:
        with av.open(io.BytesIO(data), mode="r", format=container_name) as container:
            if not container.streams.audio:
                raise AudioError("the file holds no audio stream")
            stream = container.streams.audio[0]
            resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    total += _take(out, parts)
                if total > limit:
                    raise AudioTooLong(f"the audio lasts longer than {max_seconds:g} seconds")
            for out in resampler.resample(None):
                total += _take(out, parts)
    except AudioError:
        raise
    except (av.FFmpegError, ValueError, OSError, EOFError) as exc:
        logger.info("undecodable upload (%s): %s", container_name, exc)
        raise AudioError(f"the {container_name} file cannot be decoded: {exc}") from exc
    if total > limit:
        raise AudioTooLong(f"the audio lasts longer than {max_seconds:g} seconds")
    if not parts:
        raise AudioError(f"the {container_name} file holds no audio samples")
    samples = np.concatenate(parts)
    # A malformed stream may decode to NaN or past full scale; Whisper needs [-1, 1].
    np.nan_to_num(samples, copy=False, nan=0.0, posinf=1.0, neginf=-1.0)
    np.clip(samples, -1.0, 1.0, out=samples)
    return samples


def _take(frame: Any, parts: list[np.ndarray[Any, np.dtype[np.float32]]]) -> int:
    """Keep a resampled (packed, mono) frame's samples; how many there were."""
    array = np.asarray(frame.to_ndarray(), dtype=np.float32).reshape(-1)
    if array.size:
        parts.append(array)
    return int(array.size)
