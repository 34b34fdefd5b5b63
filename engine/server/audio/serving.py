"""Transcribe or translate an uploaded audio file with a stored speech recogniser.

The translator between OpenAI's audio API and the engine: the form is read under the byte
limit (python-multipart through Starlette), checked (:mod:`.protocol`), the audio decoded
off the event loop (:mod:`engine.audio.decode`), cut into 30 s windows that overlap
(:mod:`engine.audio.windows`), and each window sent to the recogniser's worker in turn: a
long file shows progress (``stream=true`` sends each window's text as it comes), a client
that leaves stops it between windows, and no pipe message holds more than one window. A
silent window is never sent (Whisper invents words in silence): silent audio is an empty
text.

Runs on the server's event loop; the engine does the work.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from engine.audio.decode import AudioError, decode
from engine.audio.subtitles import Segment
from engine.audio.windows import Window, is_silent, join_texts, windows
from engine.models import ModelSpec
from engine.server.audio import protocol
from engine.server.errors import APIError
from engine.server.pipeline.engine import Transcriber, no_room, request_failed, unavailable
from engine.server.pipeline.models import ModelResolver
from engine.server.streaming import EventStreamResponse, sse, unless_disconnected
from engine.supervisor.states import EngineUnavailable, NoRoom, RequestFailed
from engine.worker.messages import SpeechTask, Transcribe, Transcribed

logger = logging.getLogger(__name__)

_MAX_FIELDS = 32
_MAX_FIELD_BYTES = 64 * 1024  # a text field (the prompt is the longest)


@dataclass
class _Progress:
    """What the windows said so far."""

    text: str = ""
    segments: list[Segment] = field(default_factory=list)
    language: str | None = None


class AudioServing:
    """``POST /v1/audio/transcriptions`` and ``/v1/audio/translations``."""

    def __init__(
        self, resolver: ModelResolver, engine: Transcriber, max_bytes: int, max_seconds: float
    ) -> None:
        self._resolver = resolver
        self._engine = engine
        self._max_bytes = max_bytes
        self._max_seconds = max_seconds

    async def transcriptions(self, request: Request) -> Response:
        return await self._serve(request, "transcribe")

    async def translations(self, request: Request) -> Response:
        return await self._serve(request, "translate")

    async def _serve(self, request: Request, task: SpeechTask) -> Response:
        body, data = await self._read(request, task)
        spec = await self._resolver.transcription_model(body.model)
        try:
            samples = await asyncio.to_thread(decode, data, self._max_seconds)
        except AudioError as exc:
            raise protocol.bad("file", str(exc), code="invalid_file") from exc
        del data
        seconds = len(samples) / 16000
        parts = windows(len(samples))
        progress = _Progress()
        if body.stream:
            first = await self._window(request, spec, body, samples, parts[0], progress)
            return EventStreamResponse(
                self._events(request, spec, body, samples, parts, first, progress, seconds)
            )
        for window in parts:
            await self._window(request, spec, body, samples, window, progress)
        transcript = protocol.Transcript(
            progress.text, tuple(progress.segments), progress.language, seconds
        )
        if body.response_format == "json":
            return JSONResponse(protocol.json_body(transcript))
        if body.response_format == "verbose_json":
            return JSONResponse(protocol.verbose_body(body, transcript))
        if body.response_format == "text":
            return PlainTextResponse(transcript.text + "\n")
        media = "application/x-subrip" if body.response_format == "srt" else "text/vtt"
        return PlainTextResponse(protocol.subtitles(body, transcript), media_type=media)

    async def _read(
        self, request: Request, task: SpeechTask
    ) -> tuple[protocol.AudioRequest, bytes]:
        """The checked fields and the file's bytes.

        Raises:
            APIError: 400 naming ``file`` for a body that is no form, a form that cannot be
                read, a missing, oversize or non-audio file; 400 naming a bad field.
        """
        kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if kind != "multipart/form-data":
            raise protocol.bad(
                "file", "the body must be a multipart/form-data form holding the audio file"
            )
        try:
            form = await request.form(
                max_files=1, max_fields=_MAX_FIELDS, max_part_size=_MAX_FIELD_BYTES
            )
        except HTTPException as exc:  # Starlette's answer to a form it cannot parse
            raise protocol.bad("file", f"the form cannot be read: {exc.detail}") from exc
        try:
            return await self._fields(form, task)
        finally:
            await form.close()

    async def _fields(
        self, form: FormData, task: SpeechTask
    ) -> tuple[protocol.AudioRequest, bytes]:
        items = form.multi_items()
        files = [value for name, value in items if name == "file"]
        body = protocol.parse_fields(task, items)
        if not files:
            raise protocol.bad("file", "is required: the audio to transcribe", "missing_field")
        if len(files) > 1:
            raise protocol.bad("file", "is given more than once")
        upload = files[0]
        if not isinstance(upload, UploadFile):
            raise protocol.bad("file", "must be a file upload, not a text field")
        protocol.check_content_type(upload.content_type)
        size = upload.size if upload.size is not None else 0
        if size > self._max_bytes:
            raise protocol.bad(
                "file", f"is {size} bytes; the largest audio file is {self._max_bytes} bytes"
            )
        data = await upload.read(self._max_bytes + 1)
        if len(data) > self._max_bytes:
            raise protocol.bad("file", f"is larger than {self._max_bytes} bytes")
        if not data:
            raise protocol.bad("file", "is empty")
        return body, data

    async def _window(
        self,
        request: Request,
        spec: ModelSpec,
        body: protocol.AudioRequest,
        samples: np.ndarray[Any, np.dtype[np.float32]],
        window: Window,
        progress: _Progress,
    ) -> str:
        """Transcribe one window into ``progress`` (stopped if the client leaves)."""
        work = transcribe_window(self._engine, spec, body, samples, window, progress)
        return await unless_disconnected(request, work)

    async def _events(
        self,
        request: Request,
        spec: ModelSpec,
        body: protocol.AudioRequest,
        samples: np.ndarray[Any, np.dtype[np.float32]],
        parts: list[Window],
        first: str,
        progress: _Progress,
        seconds: float,
    ) -> AsyncIterator[str]:
        """OpenAI's ``transcript.text.delta`` events, one per window, then ``done``."""
        try:
            if first:
                yield sse({"type": "transcript.text.delta", "delta": first})
            for window in parts[1:]:
                added = await self._window(request, spec, body, samples, window, progress)
                if added:
                    yield sse({"type": "transcript.text.delta", "delta": added})
        except APIError as exc:
            yield sse({"type": "error", **exc.body()})
            return
        yield sse(
            {
                "type": "transcript.text.done",
                "text": progress.text,
                "usage": protocol.usage(seconds),
            }
        )


async def transcribe_window(
    engine: Transcriber,
    spec: ModelSpec,
    body: protocol.AudioRequest,
    samples: np.ndarray[Any, np.dtype[np.float32]],
    window: Window,
    progress: _Progress,
) -> str:
    """Transcribe one window of ``samples`` and add it to ``progress``; the text it added.

    Raises:
        APIError: no room for the model (503), the engine down (503), the model failed.
    """
    chunk = samples[window.start : window.end]
    if is_silent(chunk):
        return ""
    raw = chunk.tobytes()

    def command(request_id: int, device: str) -> Transcribe:
        return Transcribe(
            request_id,
            spec,
            device,
            raw,
            task=body.task,
            language=body.language,
            prompt=body.prompt,
            temperature=body.temperature,
            timestamps=body.timestamps,
        )

    try:
        result = await engine.transcribe(spec, command)
    except NoRoom as exc:
        raise no_room(exc) from exc
    except EngineUnavailable as exc:
        raise unavailable(exc) from exc
    except RequestFailed as exc:
        raise request_failed(exc, "transcription_failed") from exc
    return _add(progress, window, result)


async def transcribe_samples(
    engine: Transcriber,
    spec: ModelSpec,
    body: protocol.AudioRequest,
    samples: np.ndarray[Any, np.dtype[np.float32]],
) -> protocol.Transcript:
    """What 16 kHz mono ``samples`` say, window by window: the endpoint's path without an
    HTTP request, for the desktop's dictation (cancel the task to stop between windows).

    Raises:
        APIError: as :func:`transcribe_window`.
    """
    progress = _Progress()
    for window in windows(len(samples)):
        await transcribe_window(engine, spec, body, samples, window, progress)
    seconds = len(samples) / 16000
    return protocol.Transcript(progress.text, tuple(progress.segments), progress.language, seconds)


def _add(progress: _Progress, window: Window, result: Transcribed) -> str:
    """Join a window's answer to what came before; the text it added (with its space)."""
    text = result.text.strip()
    if progress.language is None:
        progress.language = result.language
    before = progress.text
    progress.text = join_texts(before, text)
    added = progress.text[len(before) :]
    offset = window.start_seconds
    if result.segments:
        said = [Segment(offset + start, offset + end, t) for start, end, t in result.segments]
    elif text:
        said = [Segment(offset, window.end_seconds, text)]
    else:
        said = []
    last_end = progress.segments[-1].end if progress.segments else -1.0
    progress.segments.extend(s for s in said if s.end > last_end and s.text.strip())
    return added
