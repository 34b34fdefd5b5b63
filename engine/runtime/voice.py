"""Speech for the desktop's chat through the engine's front door: dictation and *Read aloud*.

The desktop composes nothing of the engine itself, so the two audio loops it needs are
offered here over the runtime's own pipeline and engine: :func:`transcribe` runs what a
microphone heard through the transcription endpoint's window loop
(:func:`engine.server.audio.serving.transcribe_samples`), and :func:`say_pieces` speaks
pieces of text one by one as ``/v1/audio/speech`` does
(:func:`engine.server.audio.speech.say_piece`), each yielded as soon as it is said. Models
resolve through the pipeline's resolver, so an unknown or wrong-kind model is the same
error (:class:`engine.server.errors.APIError`) the API gives.

Runs on the caller's asyncio loop (the desktop's task manager loop); cancelling the task
stops between windows or pieces.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from engine.runtime.served import ServedEngine
from engine.server.audio.protocol import AudioRequest
from engine.server.audio.serving import transcribe_samples
from engine.server.audio.speech import say_piece
from engine.server.pipeline import Pipeline

Samples = np.ndarray[Any, np.dtype[np.float32]]
VOICE: Final = "alloy"  # OpenAI's default voice name; SpeechT5 maps every name to its one


@dataclass(frozen=True)
class Said:
    """One piece of text, spoken: mono float samples in [-1, 1] and their rate."""

    samples: Samples
    sample_rate: int
    text: str


async def transcribe(pipeline: Pipeline, engine: ServedEngine, model: str, samples: Samples) -> str:
    """What 16 kHz mono ``samples`` say, as the transcription endpoint would answer (greedy,
    language detected; silence is an empty text, never invented words).

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
    return transcript.text.strip()


async def say_pieces(
    pipeline: Pipeline, engine: ServedEngine, model: str, pieces: Iterable[str]
) -> AsyncIterator[Said]:
    """Each of ``pieces`` spoken in turn by text-to-speech model ``model``.

    Raises:
        APIError: as :func:`engine.server.audio.speech.say_piece`, and 404/400 for an
            unknown or wrong-kind model.
    """
    spec = await pipeline.resolver.speech_model(model)
    for piece in pieces:
        said = await say_piece(engine, spec, piece, VOICE)
        yield Said(np.frombuffer(said.samples, dtype=np.float32), said.sample_rate, piece)
