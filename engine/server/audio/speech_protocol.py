"""OpenAI's ``POST /v1/audio/speech`` body, checked: every field a 400 naming it.

Voices: OpenAI's voice names are accepted and all speak in the model's default voice
(GenAI's SpeechT5 speaker embedding); any other name is a 400 naming ``voice``.

Pure data and functions, safe from any thread.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictStr,
    field_validator,
)

from engine.audio.encode import SpeechFormat

MAX_INPUT_CHARS: Final = 4096  # OpenAI's limit
VOICES: Final = frozenset(
    {
        "alloy",
        "ash",
        "ballad",
        "coral",
        "echo",
        "fable",
        "nova",
        "onyx",
        "sage",
        "shimmer",
        "verse",
    }
)
_MAX_INSTRUCTIONS_CHARS: Final = 4096


class SpeechRequest(BaseModel):
    """The checked body. ``instructions`` is accepted (SpeechT5 has no way to follow it)."""

    model_config = ConfigDict(extra="ignore")

    model: StrictStr = Field(min_length=1, max_length=512)
    input: StrictStr
    voice: StrictStr
    response_format: SpeechFormat = "mp3"
    speed: StrictFloat = 1.0  # strict: an int is a float, a string or a bool is not
    instructions: StrictStr | None = Field(default=None, max_length=_MAX_INSTRUCTIONS_CHARS)
    stream_format: Literal["audio"] = "audio"

    @field_validator("input")
    @classmethod
    def _input(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty: the text to speak")
        if len(value) > MAX_INPUT_CHARS:
            raise ValueError(f"is {len(value)} characters; the longest input is {MAX_INPUT_CHARS}")
        if "\x00" in value:
            raise ValueError("must not contain NUL characters")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate: GenAI's tokenizer needs UTF-8
            raise ValueError(f"is not valid Unicode at character {exc.start}") from exc
        return value

    @field_validator("voice")
    @classmethod
    def _voice(cls, value: str) -> str:
        if value.lower() not in VOICES:
            names = ", ".join(sorted(VOICES))
            raise ValueError(f"'{value[:64]}' is not a voice; the voices are {names}")
        return value.lower()

    @field_validator("speed")
    @classmethod
    def _speed(cls, value: float) -> float:
        if not 0.25 <= value <= 4.0:
            raise ValueError(f"is {value}; it must be between 0.25 and 4.0")
        return float(value)
