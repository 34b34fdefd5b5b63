"""The request and the answers of OpenAI's speech-to-text API (``/v1/audio/transcriptions``
and ``/v1/audio/translations``).

A request is a multipart form: ``file`` (the audio), ``model``, ``language`` (ISO-639-1),
``prompt``, ``temperature``, ``response_format`` (``json``, ``text``, ``srt``, ``vtt``,
``verbose_json``), ``timestamp_granularities[]`` (``segment``) and ``stream``. Every field is
checked here and a bad one is a 400 naming it; fields OpenAI has that change nothing here
(``include[]``, ``chunking_strategy``) are accepted and logged.

Pure functions over an already parsed form; safe from any thread.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from engine.audio.languages import LANGUAGES, language_name
from engine.audio.subtitles import Segment, srt, vtt
from engine.server.errors import APIError
from engine.worker.messages import SpeechTask

logger = logging.getLogger(__name__)

ResponseFormat = Literal["json", "text", "srt", "vtt", "verbose_json"]
RESPONSE_FORMATS: Final[tuple[str, ...]] = get_args(ResponseFormat)
MAX_MODEL_CHARS = 256
MAX_PROMPT_CHARS = 1000  # Whisper reads at most 224 prompt tokens; more is a 400
_FIELDS = frozenset(
    {
        "file",
        "model",
        "language",
        "prompt",
        "temperature",
        "response_format",
        "timestamp_granularities[]",
        "timestamp_granularities",
        "stream",
    }
)
_IGNORED = frozenset({"include[]", "include", "chunking_strategy"})
_NOT_AUDIO = ("text/", "image/", "application/json", "application/x-www-form-urlencoded")


@dataclass(frozen=True)
class AudioRequest:
    """A checked speech-to-text request (the file's bytes read separately)."""

    task: SpeechTask
    model: str
    language: str | None
    prompt: str | None
    temperature: float
    response_format: ResponseFormat
    stream: bool

    @property
    def timestamps(self) -> bool:
        """The answer needs timed segments."""
        return self.response_format in ("srt", "vtt", "verbose_json")


def bad(field: str, message: str, code: str = "invalid_value") -> APIError:
    """A 400 naming ``field``."""
    return APIError(400, f"{field}: {message}", param=field, code=code)


def parse_fields(task: SpeechTask, fields: Sequence[tuple[str, Any]]) -> AudioRequest:
    """Check the form's text fields (``fields``: name and value, in order, the file too).

    Raises:
        APIError: 400 naming the first bad or repeated field.
    """
    values, granularities = _collect(fields)
    model = values.get("model", "").strip()
    if not model:
        raise bad("model", "is required", code="missing_field")
    if len(model) > MAX_MODEL_CHARS:
        raise bad("model", f"is longer than {MAX_MODEL_CHARS} characters")
    response_format = values.get("response_format", "json")
    if response_format not in RESPONSE_FORMATS:
        raise bad("response_format", f"must be one of {', '.join(RESPONSE_FORMATS)}")
    stream = _boolean("stream", values.get("stream", "false"))
    if stream and response_format not in ("json", "text"):
        raise bad("stream", "streaming answers in json or text only (OpenAI's rule)")
    _granularities(granularities, response_format)
    return AudioRequest(
        task=task,
        model=model,
        language=_language(values.get("language")),
        prompt=_prompt(values.get("prompt")),
        temperature=_temperature(values.get("temperature")),
        response_format=response_format,  # type: ignore[arg-type]  # checked above
        stream=stream,
    )


def _collect(fields: Sequence[tuple[str, Any]]) -> tuple[dict[str, str], list[str]]:
    """The text fields by name (each once) and the timestamp granularities asked for."""
    values: dict[str, str] = {}
    granularities: list[str] = []
    unknown: list[str] = []
    for name, value in fields:
        if name == "file":
            continue
        if name not in _FIELDS:
            if name not in _IGNORED:
                unknown.append(name)
            continue
        if not isinstance(value, str):
            raise bad(name, "must be a text field, not a file")
        if name in ("timestamp_granularities[]", "timestamp_granularities"):
            granularities.append(value)
        elif name in values:
            raise bad(name, "is given more than once")
        else:
            values[name] = value
    if unknown:
        logger.info("audio request: ignoring unknown fields %s", ", ".join(sorted(unknown)))
    return values, granularities


def _granularities(granularities: list[str], response_format: str) -> None:
    field = "timestamp_granularities[]"
    for granularity in granularities:
        if granularity == "word":
            raise bad(field, "word timestamps are not supported")
        if granularity != "segment":
            raise bad(field, "must be segment (or word)")
    if granularities and response_format != "verbose_json":
        raise bad(field, "needs response_format verbose_json")


def check_content_type(declared: str | None) -> None:
    """Refuse a file part that says it is not audio (text, an image, JSON).

    Raises:
        APIError: 400 naming ``file``.
    """
    kind = (declared or "").split(";", 1)[0].strip().lower()
    if kind.startswith(_NOT_AUDIO):
        raise bad("file", f"has content type '{kind[:64]}', not audio", code="invalid_file")


def _boolean(field: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0", ""):
        return False
    raise bad(field, "must be true or false")


def _language(value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    code = value.strip().lower()
    if code not in LANGUAGES:
        raise bad("language", "must be an ISO-639-1 code Whisper knows (en, de, fr, ...)")
    return code


def _prompt(value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    if len(value) > MAX_PROMPT_CHARS:
        raise bad("prompt", f"is longer than {MAX_PROMPT_CHARS} characters")
    return value


def _temperature(value: str | None) -> float:
    if value is None or not value.strip():
        return 0.0
    try:
        number = float(value)
    except ValueError:
        raise bad("temperature", "must be a number between 0 and 1") from None
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise bad("temperature", "must be a number between 0 and 1")
    return number


# ---- answers -------------------------------------------------------------------------


@dataclass(frozen=True)
class Transcript:
    """What the audio said: the text, its segments, the language and how long it lasted."""

    text: str
    segments: tuple[Segment, ...]
    language: str | None
    seconds: float


def usage(seconds: float) -> dict[str, Any]:
    """OpenAI's duration usage (whole seconds, rounded up)."""
    return {"type": "duration", "seconds": math.ceil(seconds)}


def json_body(transcript: Transcript) -> dict[str, Any]:
    return {"text": transcript.text, "usage": usage(transcript.seconds)}


def verbose_body(request: AudioRequest, transcript: Transcript) -> dict[str, Any]:
    """``verbose_json``: the text, the language's name, the duration and the segments."""
    return {
        "task": request.task,
        "language": language_name(transcript.language) if transcript.language else None,
        "duration": round(transcript.seconds, 3),
        "text": transcript.text,
        "segments": [
            {
                "id": index,
                "seek": 0,
                "start": round(segment.start, 3),
                "end": round(segment.end, 3),
                "text": segment.text,
                "temperature": request.temperature,
            }
            for index, segment in enumerate(transcript.segments)
        ],
        "usage": usage(transcript.seconds),
    }


def subtitles(request: AudioRequest, transcript: Transcript) -> str:
    """The ``srt`` or ``vtt`` body."""
    return (
        srt(transcript.segments) if request.response_format == "srt" else vtt(transcript.segments)
    )
