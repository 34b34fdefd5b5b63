"""Dictation and *Read aloud* as the chat runs them: the audio endpoints' engine paths.

Dictation sends what the microphone heard (16 kHz mono samples) through the same window
loop as ``POST /v1/audio/transcriptions`` (:func:`engine.server.audio.serving.transcribe_samples`);
*Read aloud* speaks a reply piece by piece as ``POST /v1/audio/speech`` does
(:func:`engine.server.audio.speech.say_piece`), yielding each piece as soon as it is said so
playback starts after the first sentence. Both resolve their model through the pipeline's
resolver, so an unknown or wrong-kind model is the same error the API gives.

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
from engine.server.audio.protocol import AudioRequest
from engine.server.audio.serving import transcribe_samples
from engine.server.audio.speech import say_piece
from engine.server.pipeline import Pipeline
from engine.server.pipeline.engine import Synthesizer, Transcriber
from engine.store import StoredModel

Samples = np.ndarray[Any, np.dtype[np.float32]]

# What the chat offers to fetch when no model of the kind is installed (catalog entry ids).
DICTATION_PICK: Final = ("whisper-base-fp16", "Whisper Base")
READ_ALOUD_PICK: Final = ("speecht5-tts", "SpeechT5")
VOICE: Final = "alloy"  # OpenAI's default voice name; SpeechT5 maps every name to its one


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


@dataclass(frozen=True)
class Spoken:
    """One piece of a reply, said: mono float samples in [-1, 1] and their rate."""

    samples: Samples
    sample_rate: int
    text: str


async def dictate(
    pipeline: Pipeline, engine: Transcriber, model: str, samples: Samples
) -> AsyncIterator[str]:
    """Yield once: what ``samples`` (16 kHz mono) say, as the transcription endpoint would
    answer them (silence is an empty text, never invented words).

    Raises:
        APIError: the model is unknown or no speech recogniser (404/400), no room or the
            engine is down (503), the model failed.
    """
    spec = await pipeline.resolver.transcription_model(model)
    request = AudioRequest(
        task="transcribe",
        model=model,
        language=None,
        prompt=None,
        temperature=0.0,
        response_format="json",
        stream=False,
    )
    transcript = await transcribe_samples(engine, spec, request, samples)
    yield transcript.text.strip()


async def read_aloud(
    pipeline: Pipeline, engine: Synthesizer, model: str, text: str
) -> AsyncIterator[Spoken]:
    """Yield ``text`` spoken, piece by piece (sentences packed to what the model says in
    one go), each as soon as it is said. Markdown is read as prose (:func:`spoken_text`).

    Raises:
        APIError: as :func:`engine.server.audio.speech.say_piece`, and 404/400 for an
            unknown or wrong-kind model.
    """
    spec = await pipeline.resolver.speech_model(model)
    for part in pieces(spoken_text(text)):
        said = await say_piece(engine, spec, part, VOICE)
        samples = np.frombuffer(said.samples, dtype=np.float32)
        yield Spoken(samples, said.sample_rate, part)


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
