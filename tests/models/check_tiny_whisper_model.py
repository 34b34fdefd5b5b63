"""Check the tiny Whisper through GenAI: every clip transcribes to its sentence exactly.

Run in the runtime venv after ``build_tiny_whisper_model.py``::

    .venv/bin/python tests/models/check_tiny_whisper_model.py

Transcribes each clip (and the silent one) with ``openvino_genai.WhisperPipeline``: without
timestamps, with them (one segment from 0 s), translated (English stays English), and with
the language detected; exits 1 after logging every mismatch.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL = REPO_ROOT / "tests" / "fixtures" / "tiny-whisper"
AUDIO = REPO_ROOT / "tests" / "fixtures" / "audio"

logger = logging.getLogger("check_tiny_whisper_model")


def _samples(path: Path) -> list[float]:
    import wave

    with wave.open(str(path)) as clip:
        assert clip.getframerate() == 16000 and clip.getnchannels() == 1
        raw = clip.readframes(clip.getnframes())
    samples: list[float] = (np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0).tolist()
    return samples


def main() -> int:
    import openvino_genai as ov_genai

    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    facts = json.loads((AUDIO / "transcripts.json").read_text())
    pipe = ov_genai.WhisperPipeline(str(MODEL), "CPU")
    failures = 0
    for name, expected in facts["transcripts"].items():
        audio = _samples(AUDIO / f"{name}.wav")
        cases = {
            "detected": {},
            "english": {"language": "<|en|>", "task": "transcribe"},
            "translate": {"language": "<|en|>", "task": "translate"},
        }
        for label, options in cases.items():
            text = str(pipe.generate(audio, **options).texts[0]).strip()
            ok = text == expected
            failures += not ok
            logger.info("%-7s %-9s %r%s", name, label, text, "" if ok else f" != {expected!r}")
        timed = pipe.generate(audio, language="<|en|>", return_timestamps=True)
        chunks = [(c.start_ts, c.end_ts, str(c.text).strip()) for c in timed.chunks or []]
        ok = len(chunks) == 1 and chunks[0][0] == 0.0 and chunks[0][2] == expected
        failures += not ok
        logger.info("%-7s %-9s %r%s", name, "timed", chunks, "" if ok else " (not one segment)")
    # Whisper may not end at once (begin_suppress_tokens holds <|endoftext|> back), so it
    # says something in silence: the server never sends a silent window (engine/audio).
    silent = str(pipe.generate(_samples(AUDIO / facts["silence"])).texts[0]).strip()
    logger.info("silence (logged, not checked): %r", silent)
    logger.info("%d mismatches", failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
