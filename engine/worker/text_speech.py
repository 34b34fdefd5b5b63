"""Text-to-speech models in the engine worker: GenAI's ``Text2SpeechPipeline`` (SpeechT5).

A speech synthesiser is loaded on the first request that names it (the scheduler gives it a
worker of its own, as it does embedding models) and kept until another is named. Each
:class:`~engine.worker.messages.Synthesize` carries one piece of text (the server cuts long
input into pieces, :data:`engine.audio.pieces.MAX_PIECE_CHARS` at most), so one call here
never holds the loop longer than one piece takes.

Voices: every voice name OpenAI lists maps to GenAI's default SpeechT5 speaker embedding
(one CMU Arctic x-vector); the server refused any other name.

Threading: used only from the worker's single loop thread.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from engine.models import verify_files
from engine.worker.messages import Synthesize, Synthesized

logger = logging.getLogger(__name__)


class SynthesisRefused(Exception):
    """A request the synthesiser cannot run; ``param`` names the field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


class TextSpeechRunner:
    """Loads text-to-speech models on demand and speaks pieces of text with them."""

    def __init__(self) -> None:
        self._key: tuple[Path, str] | None = None
        self._pipe: Any = None

    def synthesize(self, command: Synthesize) -> Synthesized:
        """The samples of one piece of text, spoken in the default voice.

        Raises:
            SynthesisRefused: an empty piece.
            ModelError: the model's files failed their check.
            Exception: GenAI could not load or run the model (the worker reports it).
        """
        import numpy as np

        if not command.text.strip():
            raise SynthesisRefused("there is nothing to say", "input")
        self._load(command)
        result = self._pipe.generate(command.text)
        speech = np.asarray(result.speeches[0].data, dtype=np.float32).reshape(-1)
        return Synthesized(command.request_id, speech.tobytes(), int(result.output_sample_rate))

    def _load(self, command: Synthesize) -> None:
        import openvino_genai as ov_genai

        spec, device = command.spec, command.device
        key = (spec.path, device)
        if self._key == key:
            return
        self.close()
        verify_files(spec)  # the server checked too; the files may have changed since
        logger.info("loading text-to-speech model %s on %s", spec.id, device)
        self._pipe = ov_genai.Text2SpeechPipeline(str(spec.path), device)
        self._key = key

    def close(self) -> None:
        self._pipe = self._key = None
