"""Speak text with a stored text-to-speech model: OpenAI's ``POST /v1/audio/speech``.

The body is checked (:mod:`.speech_protocol`), the input cut into pieces the model can say
(:mod:`engine.audio.pieces`) and each piece sent to the model's worker in turn, so no pipe
message holds more than one piece and a client that leaves stops it between pieces. ``wav``
and ``pcm`` stream (chunked transfer) piece by piece; ``flac``, ``mp3``, ``opus`` and
``aac`` are encoded by PyAV once every piece is spoken. The first piece is spoken before any
byte is sent, so a model that cannot load or a refused field is still a proper 4xx/5xx; a
failure after that aborts the stream (the client sees an incomplete transfer, never a
short file that looks whole).

Runs on the server's event loop; the engine does the work, PyAV runs on a thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import numpy as np
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from engine.audio.encode import (
    MEDIA_TYPES,
    STREAMED_FORMATS,
    Samples,
    at_speed,
    encode,
    pcm16,
    wav_header,
)
from engine.audio.pieces import pieces
from engine.models import ModelSpec
from engine.server.audio.speech_protocol import SpeechRequest
from engine.server.pipeline.engine import Synthesizer, no_room, request_failed, unavailable
from engine.server.pipeline.models import ModelResolver
from engine.server.request_body import parse_body
from engine.server.streaming import unless_disconnected
from engine.supervisor.states import EngineUnavailable, NoRoom, RequestFailed
from engine.worker.messages import Synthesize, Synthesized

logger = logging.getLogger(__name__)


class SpeechServing:
    """``POST /v1/audio/speech``."""

    def __init__(self, resolver: ModelResolver, engine: Synthesizer) -> None:
        self._resolver = resolver
        self._engine = engine

    async def speech(self, request: Request) -> Response:
        body = await parse_body(request, SpeechRequest)
        spec = await self._resolver.speech_model(body.model)
        parts = pieces(body.input)
        fmt = body.response_format
        first = await self._piece(request, spec, body, parts[0])
        media = MEDIA_TYPES[fmt]
        if fmt in STREAMED_FORMATS:
            return StreamingResponse(
                self._stream(request, spec, body, parts, first), media_type=media
            )
        said = [_samples(first, body.speed)]
        for part in parts[1:]:
            said.append(_samples(await self._piece(request, spec, body, part), body.speed))
        audio = np.concatenate(said)
        data = await asyncio.to_thread(encode, audio, first.sample_rate, fmt)
        return Response(data, media_type=media)

    async def _stream(
        self,
        request: Request,
        spec: ModelSpec,
        body: SpeechRequest,
        parts: list[str],
        first: Synthesized,
    ) -> AsyncIterator[bytes]:
        """The audio piece by piece (a WAV of one piece has exact sizes in its header)."""
        samples = _samples(first, body.speed)
        if body.response_format == "wav":
            frames = len(samples) if len(parts) == 1 else None
            yield wav_header(first.sample_rate, frames)
        yield pcm16(samples)
        for part in parts[1:]:
            try:
                # StreamingResponse watches for the client leaving (and cancels this) itself
                said = await self._piece(request, spec, body, part, watch=False)
            except Exception:
                logger.exception("speech from %s failed part-way; aborting the stream", spec.id)
                raise
            yield pcm16(_samples(said, body.speed))

    async def _piece(
        self,
        request: Request,
        spec: ModelSpec,
        body: SpeechRequest,
        text: str,
        watch: bool = True,
    ) -> Synthesized:
        """Speak one piece in the model's worker (``watch``: stop if the client leaves)."""
        work = say_piece(self._engine, spec, text, body.voice)
        return await (unless_disconnected(request, work) if watch else work)


async def say_piece(engine: Synthesizer, spec: ModelSpec, text: str, voice: str) -> Synthesized:
    """Speak one piece of text in the model's worker.

    Raises:
        APIError: no room for the model (503), the engine down (503), the model failed.
    """

    def command(request_id: int, device: str) -> Synthesize:
        return Synthesize(request_id, spec, device, text, voice)

    try:
        return await engine.synthesize(spec, command)
    except NoRoom as exc:
        raise no_room(exc) from exc
    except EngineUnavailable as exc:
        raise unavailable(exc) from exc
    except RequestFailed as exc:
        raise request_failed(exc, "speech_failed") from exc


async def speak(
    engine: Synthesizer, spec: ModelSpec, text: str, voice: str = "alloy", speed: float = 1.0
) -> tuple[Samples, int]:
    """All of ``text`` spoken, piece by piece (mono float samples, their rate): the
    endpoint's path without an HTTP request, for the desktop's *Read aloud* (cancel the
    task to stop between pieces).

    Raises:
        APIError: as :func:`say_piece`.
    """
    said: list[Samples] = []
    rate = 0
    for part in pieces(text):
        piece = await say_piece(engine, spec, part, voice)
        rate = piece.sample_rate
        said.append(_samples(piece, speed))
    return np.concatenate(said), rate


def _samples(said: Synthesized, speed: float) -> Samples:
    return at_speed(np.frombuffer(said.samples, dtype=np.float32), speed)
