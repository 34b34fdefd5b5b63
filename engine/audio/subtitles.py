"""SubRip (``.srt``) and WebVTT (``.vtt``) from timed segments, as OpenAI answers them.

Pure functions; safe from any thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Segment:
    """A stretch of speech: seconds from the start of the audio, and what was said."""

    start: float
    end: float
    text: str


def _clock(seconds: float, separator: str) -> str:
    millis = max(0, round(seconds * 1000))
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def srt(segments: Sequence[Segment]) -> str:
    """SubRip: numbered cues, ``HH:MM:SS,mmm`` times, a blank line after each cue."""
    cues = [
        f"{index}\n{_clock(s.start, ',')} --> {_clock(s.end, ',')}\n{s.text.strip()}\n"
        for index, s in enumerate(segments, start=1)
    ]
    return "\n".join(cues)


def vtt(segments: Sequence[Segment]) -> str:
    """WebVTT: the ``WEBVTT`` header, then ``HH:MM:SS.mmm`` cues."""
    cues = [
        f"{_clock(s.start, '.')} --> {_clock(s.end, '.')}\n{s.text.strip()}\n" for s in segments
    ]
    return "WEBVTT\n\n" + "\n".join(cues)
