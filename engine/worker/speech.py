"""Speech recognisers in the engine worker: GenAI's ``WhisperPipeline``.

A recogniser is loaded on the first request that names it (the scheduler gives it a worker
of its own, as it does embedding models) and kept until another is named. Each
:class:`~engine.worker.messages.Transcribe` carries one window of at most 30 s of 16 kHz
mono audio; the server cuts longer audio and sends the windows one by one, so one call
here never holds the loop longer than one window takes and never receives more than one
window's samples.

Threading: used only from the worker's single loop thread.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from engine.models import verify_files
from engine.worker.messages import Transcribe, Transcribed

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000
WINDOW_SECONDS = 30.0
# Whisper writes at most 448 tokens per window (its decoder's positions); the prompt and
# the few start tokens take some.
MAX_NEW_TOKENS = 440


class SpeechRefused(Exception):
    """A request the recogniser cannot run; ``param`` names the field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


class SpeechRunner:
    """Loads speech recognisers on demand and transcribes windows with them."""

    def __init__(self) -> None:
        self._key: tuple[Path, str] | None = None
        self._pipe: Any = None
        self._languages: frozenset[str] = frozenset()

    def transcribe(self, command: Transcribe) -> Transcribed:
        """The text (and segments when asked) of one window.

        Raises:
            SpeechRefused: a language the model does not know, or a window too long.
            ModelError: the model's files failed their check.
            Exception: GenAI could not load or run the model (the worker reports it).
        """
        import numpy as np

        samples = np.frombuffer(command.samples, dtype=np.float32)
        if len(samples) > SAMPLE_RATE * WINDOW_SECONDS:
            raise SpeechRefused("a window holds at most 30 s of audio", "file")
        self._load(command)
        config = self._pipe.get_generation_config()
        if not config.is_multilingual:  # an English-only model (``.en``): no language token
            return self._run(command, config, samples)
        if command.language is not None:
            token = f"<|{command.language}|>"
            if self._languages and token not in self._languages:
                raise SpeechRefused(
                    f"{command.spec.id} does not know the language '{command.language}'",
                    "language",
                )
            config.language = token
        config.task = command.task
        return self._run(command, config, samples)

    def _run(self, command: Transcribe, config: Any, samples: Any) -> Transcribed:
        """Generate with ``config`` (language and task set) and read the result back."""
        config.return_timestamps = command.timestamps
        config.max_new_tokens = MAX_NEW_TOKENS
        if command.prompt:
            config.initial_prompt = command.prompt
        if command.temperature > 0:
            config.do_sample = True
            config.temperature = command.temperature
        result = self._pipe.generate(samples, config)
        text = str(result.texts[0]) if result.texts else ""
        segments: tuple[tuple[float, float, str], ...] = ()
        if command.timestamps and result.chunks:
            segments = tuple(
                (float(chunk.start_ts), float(chunk.end_ts), str(chunk.text))
                for chunk in result.chunks
            )
        return Transcribed(command.request_id, text, segments, _language(result, command))

    def _load(self, command: Transcribe) -> None:
        import openvino_genai as ov_genai

        spec, device = command.spec, command.device
        key = (spec.path, device)
        if self._key == key:
            return
        self.close()
        verify_files(spec)  # the server checked too; the files may have changed since
        logger.info("loading speech model %s on %s", spec.id, device)
        self._pipe = ov_genai.WhisperPipeline(str(spec.path), device)
        config = self._pipe.get_generation_config()
        self._languages = frozenset(str(token) for token in (config.lang_to_id or {}))
        self._key = key

    def close(self) -> None:
        self._pipe = self._key = None
        self._languages = frozenset()


def _language(result: Any, command: Transcribe) -> str | None:
    """The language spoken: the one asked for, else what the model detected."""
    if command.language is not None:
        return command.language
    detected = getattr(result, "language", None)  # WhisperDecodedResults: "en"
    return str(detected).strip("<|>") or None if detected else None
