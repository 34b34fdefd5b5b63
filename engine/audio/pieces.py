"""Cut text to speak into pieces a SpeechT5 model can say in one go.

SpeechT5 writes up to ``maxlenratio`` (20) spectrogram frames per input token and has 1,876
decoder positions, so one call speaks at most about 180 characters (its tokens are
characters). Long input is cut at sentence ends, else at spaces, else anywhere, into pieces
of at most :data:`MAX_PIECE_CHARS` (short sentences packed together); the server speaks
them one after the other.

Pure functions, safe from any thread.
"""

from __future__ import annotations

import re
from typing import Final

MAX_PIECE_CHARS: Final = 150
_SENTENCE = re.compile(r"(?<=[.!?;:])\s+")


def pieces(text: str, limit: int = MAX_PIECE_CHARS) -> list[str]:
    """``text`` in order as pieces of at most ``limit`` characters, none blank."""
    out: list[str] = []
    for sentence in _SENTENCE.split(text.strip()):
        current = ""
        for whole in sentence.split():
            word = whole
            while len(word) > limit:  # a "word" longer than a piece: cut it
                if current:
                    out.append(current)
                    current = ""
                out.append(word[:limit])
                word = word[limit:]
            if not word:
                continue
            joined = f"{current} {word}" if current else word
            if len(joined) > limit:
                out.append(current)
                current = word
            else:
                current = joined
        if current:
            out.append(current)
    return _packed(out, limit)


def _packed(cut: list[str], limit: int) -> list[str]:
    """Neighbouring pieces joined while they fit (short sentences are spoken together)."""
    out: list[str] = []
    for piece in cut:
        if out and len(out[-1]) + 1 + len(piece) <= limit:
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out
