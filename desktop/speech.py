"""Dictation and *Read aloud* as the chat runs them: the audio endpoints' engine paths.

Dictation sends what the microphone heard (16 kHz mono samples) through the same window
loop as ``POST /v1/audio/transcriptions``; *Read aloud* speaks a reply piece by piece as
``POST /v1/audio/speech`` does, yielding each piece as soon as it is said so playback
starts after the first sentence. Both come through the engine's front door
(:mod:`engine.runtime.voice`), so an unknown or wrong-kind model is the same error the
API gives.

Nothing here imports Qt: the chat runs these generators with
:meth:`desktop.taskman.TaskManager.stream` on its asyncio loop (cancelling the worker stops
between windows or pieces).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from engine.audio.pieces import pieces
from engine.runtime import Said, ServedEngine, say_pieces, transcribe
from engine.server.pipeline import Pipeline
from engine.store import StoredModel

Samples = np.ndarray[Any, np.dtype[np.float32]]

# What the chat offers to fetch when no model of the kind is installed (catalog entry ids).
DICTATION_PICK: Final = ("whisper-base-fp16", "Whisper Base")
READ_ALOUD_PICK: Final = ("speecht5-tts", "SpeechT5")


@dataclass(frozen=True)
class SpeechModels:
    """The installed models the chat's dictation and *Read aloud* use (None: none)."""

    transcription: str | None = None
    speech: str | None = None


def speech_models(stored: Iterable[StoredModel]) -> SpeechModels:
    """The first speech recogniser and text-to-speech model among ``stored`` (by name)."""
    ordered = sorted(stored, key=lambda m: m.manifest.name.lower())

    def first(task: str) -> str | None:
        return next((m.id for m in ordered if m.manifest.task == task), None)

    return SpeechModels(first("transcription"), first("speech"))


async def dictate(
    pipeline: Pipeline, engine: ServedEngine, model: str, samples: Samples
) -> AsyncIterator[str]:
    """Yield once: what ``samples`` (16 kHz mono) say (:func:`engine.runtime.transcribe`).

    Raises:
        APIError: as :func:`engine.runtime.transcribe`.
    """
    yield await transcribe(pipeline, engine, model, samples)


async def read_aloud(
    pipeline: Pipeline, engine: ServedEngine, model: str, text: str
) -> AsyncIterator[Said]:
    """Yield ``text`` spoken, piece by piece (sentences packed to what the model says in
    one go), each as soon as it is said. Markdown is read as prose (:func:`spoken_text`).

    Raises:
        APIError: as :func:`engine.runtime.say_pieces`.
    """
    async for said in say_pieces(pipeline, engine, model, pieces(spoken_text(text))):
        yield said


_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.DOTALL | re.MULTILINE)
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MARKS = re.compile(r"\*\*|__|~~|`|(?<!\w)[*_]|[*_](?!\w)")
_HEADING = re.compile(r"^\s{0,3}(#{1,6}|>+|[-*+]|\d+[.)])\s+", re.MULTILINE)
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}.*$", re.MULTILINE)


def spoken_text(markdown: str) -> str:
    """A reply's Markdown as something to say: code blocks named, not spelled out; links
    read by their text; emphasis, headings, list and quote markers and table rules
    dropped (a voice reading "asterisk asterisk" helps no one)."""
    text = _FENCE.sub(" (code block) ", markdown)
    text = _LINK.sub(r"\1", text)
    text = _TABLE_RULE.sub("", text)
    text = _HEADING.sub("", text)
    text = _MARKS.sub("", text)
    text = text.replace("|", ", ")
    return " ".join(text.split())
