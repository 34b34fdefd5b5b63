"""Routes of the speech-to-text API, where OpenAI has them."""

from __future__ import annotations

from starlette.routing import Route

from engine.server.audio.serving import AudioServing
from engine.server.pipeline.engine import Transcriber
from engine.server.pipeline.models import ModelResolver


def audio_routes(
    resolver: ModelResolver, engine: Transcriber, max_bytes: int, max_seconds: float
) -> list[Route]:
    serving = AudioServing(resolver, engine, max_bytes, max_seconds)
    return [
        Route("/v1/audio/transcriptions", serving.transcriptions, methods=["POST"]),
        Route("/v1/audio/translations", serving.translations, methods=["POST"]),
    ]
