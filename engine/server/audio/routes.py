"""Routes of the speech-to-text and text-to-speech API, where OpenAI has them."""

from __future__ import annotations

from typing import Protocol

from starlette.routing import Route

from engine.server.audio.serving import AudioServing
from engine.server.audio.speech import SpeechServing
from engine.server.pipeline.engine import Synthesizer, Transcriber
from engine.server.pipeline.models import ModelResolver


class _AudioEngine(Transcriber, Synthesizer, Protocol):
    """The engine the audio endpoints use."""


def audio_routes(
    resolver: ModelResolver, engine: _AudioEngine, max_bytes: int, max_seconds: float
) -> list[Route]:
    serving = AudioServing(resolver, engine, max_bytes, max_seconds)
    speaking = SpeechServing(resolver, engine)
    return [
        Route("/v1/audio/transcriptions", serving.transcriptions, methods=["POST"]),
        Route("/v1/audio/translations", serving.translations, methods=["POST"]),
        Route("/v1/audio/speech", speaking.speech, methods=["POST"]),
    ]
