"""Cut long audio into the 30 s windows Whisper reads, and join what each window says.

Windows overlap by :data:`OVERLAP_SECONDS` so a word cut at one window's end is heard
whole at the next one's start; the words the two windows both heard are then said once
(:func:`join_texts`). A window that is silent (its peak below :data:`SILENCE_PEAK`, about
-60 dBFS) is not sent to the model at all: Whisper invents words in silence.

Pure functions; safe from any thread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.audio.decode import SAMPLE_RATE

WINDOW_SECONDS = 30.0
OVERLAP_SECONDS = 2.0
SILENCE_PEAK = 1e-3
_MAX_OVERLAP_WORDS = 16
_WORD = re.compile(r"[^\w']+")


@dataclass(frozen=True)
class Window:
    """One window: its first sample and the sample past its end."""

    start: int
    end: int

    @property
    def start_seconds(self) -> float:
        return self.start / SAMPLE_RATE

    @property
    def end_seconds(self) -> float:
        return self.end / SAMPLE_RATE


def windows(
    count: int, window_seconds: float = WINDOW_SECONDS, overlap_seconds: float = OVERLAP_SECONDS
) -> list[Window]:
    """The windows covering ``count`` samples (one for short audio, none for no audio)."""
    size = int(window_seconds * SAMPLE_RATE)
    step = size - int(overlap_seconds * SAMPLE_RATE)
    if step <= 0:
        raise ValueError("the overlap must be shorter than the window")
    out: list[Window] = []
    start = 0
    while start < count:
        end = min(start + size, count)
        out.append(Window(start, end))
        if end == count:
            break
        start += step
    return out


def is_silent(samples: np.ndarray[Any, np.dtype[np.float32]]) -> bool:
    """True when nothing in ``samples`` rises above :data:`SILENCE_PEAK`."""
    return samples.size == 0 or float(np.max(np.abs(samples))) < SILENCE_PEAK


def _words(text: str) -> list[str]:
    return [_WORD.sub("", word).lower() for word in text.split()]


def join_texts(previous: str, following: str) -> str:
    """``following`` without the words at its start that end ``previous`` (heard twice, in
    the overlap), joined to ``previous`` by one space."""
    before, after = _words(previous), _words(following)
    longest = min(len(before), len(after), _MAX_OVERLAP_WORDS)
    drop = 0
    for size in range(longest, 0, -1):
        if before[-size:] == after[:size] and any(before[-size:]):
            drop = size
            break
    rest = " ".join(following.split()[drop:])
    if not previous.strip():
        return rest
    if not rest:
        return previous.strip()
    return f"{previous.strip()} {rest}"
