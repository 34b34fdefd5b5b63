"""Encode a whole prompt, even with a tokenizer that truncates on its own.

GenAI's tokenizer built from a GGUF file cuts every encoding at 8,192 tokens and ignores
``max_length``/``truncation`` (measured with openvino-genai 2026.x: a 20,000-token prompt came
back as 8,192 ids with ``truncation=False`` and with ``max_length=100000``). Served as-is, a
GGUF model with a 32k context answered a 20k prompt from its last 8k tokens and reported
``prompt_tokens: 8192``. Nothing here truncates: :func:`encoding_limit` measures the cap once
per loaded tokenizer, and :func:`encode_whole` encodes a longer text in pieces, each small
enough to stay below the cap.

Where a piece ends (:func:`split_points`) is chosen so the ids are those of one encoding:
a tokenizer's pre-tokenizer (byte-level BPE: GPT-2, Qwen, Llama 3) never merges across its
own boundaries, so a cut on one of them changes nothing. The candidates, best first: after a
line break that a non-space character follows; before a space or tab that a non-space
character follows; before a run of punctuation after a letter or digit (minified JSON,
code); then any character boundary. Each candidate is checked on the text around it: the
window encoded whole must give the ids of its two halves encoded apart (which also keeps a
special token such as ``<|im_end|>`` from being cut in two). Only when no candidate near the
end of a piece passes is the piece cut at the character boundary its size allows (a run of
letters longer than a piece that BPE merges everywhere); that cut keeps every character,
though the tokens beside it may differ from one encoding's. Every
piece must decode back to itself, or the prompt is refused (:class:`PromptTooLongToEncode`),
never cut. Agents send such prompts: Qwen-style templates put each tool schema on one line.

Runs in the engine worker (the tokenizer's owner), on the worker's one command thread.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

logger = logging.getLogger(__name__)

# How far a tokenizer's cap is probed: beyond every context the engine serves.
PROBE_TOKENS_MAX = 1 << 20
# One character is at most this many tokens (UTF-8 bytes, byte-fallback vocabularies).
TOKENS_PER_CHAR_MAX = 4
# Candidate cut positions, best first (each match's start is the cut).
_BOUNDARIES = (
    re.compile(r"(?<=\n)(?=\S)"),  # a new line that starts with text
    re.compile(r"[ \t](?=\S)"),  # before a space or tab that text follows
    re.compile(r"(?<=[^\W_])(?=[^\w\s])"),  # before punctuation after a letter or digit
)
# Characters each side of a candidate cut encoded to check it.
CHECK_WINDOW = 256
# Candidates tried per boundary kind before the next kind (a piece's last ones).
TRIES_PER_KIND = 8
# A piece is at least this share of its largest size, so pieces never become tiny.
_MIN_SHARE = 0.5


class PromptTooLongToEncode(Exception):
    """The tokenizer caps encodings and the text cannot be split safely below its cap."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the prompt has more than {limit} tokens, the most this model's tokenizer encodes "
            "at once, and it cannot be encoded in pieces that decode back to the same text"
        )
        self.limit = limit


def encoding_limit(tokenizer: Any, context_length: int | None) -> int | None:
    """The number of tokens the tokenizer cuts every encoding at, or None if it does not.

    Probes with a text of more tokens than the model's context (so a cap beyond the
    context, which no prompt can reach, reads as "none").
    """
    wanted = min((context_length or 8192) + 1, PROBE_TOKENS_MAX)
    started = time.perf_counter()
    try:
        ids = _ids(tokenizer, "a\n" * wanted, add_special=False)
    except Exception:  # a tokenizer that cannot encode at all fails each request instead
        logger.warning("could not probe the tokenizer's cap", exc_info=True)
        return None
    logger.debug("probed the tokenizer's cap in %.3fs", time.perf_counter() - started)
    # "a\n" is at least one token per repetition, so fewer ids than repetitions is a cap.
    if len(ids) < wanted:
        logger.info(
            "the tokenizer cuts encodings at %d tokens; long prompts go in pieces", len(ids)
        )
        return len(ids)
    return None


def encode_whole(tokenizer: Any, text: str, add_special: bool, limit: int | None) -> list[int]:
    """Every token of ``text``.

    Raises:
        PromptTooLongToEncode: the tokenizer caps encodings at ``limit`` and a piece of
            ``text`` below it does not decode back to itself.
    """
    ids = _ids(tokenizer, text, add_special)
    if limit is None or len(ids) < limit:
        return ids
    max_chars = max(1, (limit - 8) // TOKENS_PER_CHAR_MAX)
    window = max(1, min(CHECK_WINDOW, max_chars // 2))

    def clean(position: int) -> bool:
        return _clean_cut(tokenizer, text, position, window)

    cuts = split_points(text, max_chars, clean)
    out: list[int] = []
    for index, (begin, end) in enumerate(zip([0, *cuts], [*cuts, len(text)], strict=True)):
        piece = text[begin:end]
        piece_ids = _ids(tokenizer, piece, add_special and index == 0)
        if len(piece_ids) >= limit:
            raise PromptTooLongToEncode(limit)
        if index > 0 and _decode(tokenizer, piece_ids) != piece:
            raise PromptTooLongToEncode(limit)  # a piece boundary changed the text
        out.extend(piece_ids)
    logger.debug("encoded %d characters in %d pieces", len(text), len(cuts) + 1)
    return out


def split_points(
    text: str, max_chars: int, clean: Callable[[int], bool] = lambda _: True
) -> list[int]:
    """Where to cut ``text`` into pieces of at most ``max_chars`` characters (ascending).

    Each piece ends at the last candidate boundary within its reach (see the module's
    docstring: line break, then space, then punctuation, then any character) that
    ``clean`` accepts, no earlier than half its largest size; failing all of them, at the
    character boundary ``max_chars`` on (never between ``\\r`` and ``\\n``). ``text[a:b]`` over consecutive
    points, with 0 and ``len(text)`` added, joins back to ``text``.
    """
    if max_chars < 1:
        raise ValueError("max_chars must be at least 1")
    cuts: list[int] = []
    start = 0
    while len(text) - start > max_chars:
        cut = _best_cut(text, start, max_chars, clean)
        cuts.append(cut)
        start = cut
    return cuts


def _best_cut(text: str, start: int, max_chars: int, clean: Callable[[int], bool]) -> int:
    reach = start + max_chars
    floor = start + max(1, int(max_chars * _MIN_SHARE))
    for boundary in _BOUNDARIES:
        for position in _last_matches(boundary, text, floor, reach):
            if clean(position):
                return position
    # No boundary of those kinds: the last character boundaries that still cut cleanly
    # (inside a run of letters, BPE may merge across some and not others).
    for position in range(reach, max(floor, reach - TRIES_PER_KIND) - 1, -1):
        if text[position - 1 : position + 1] != "\r\n" and clean(position):
            return position
    cut = reach
    if text[cut - 1] == "\r" and text[cut] == "\n" and cut - 1 > start:
        cut -= 1
    return cut


def _last_matches(boundary: re.Pattern[str], text: str, floor: int, reach: int) -> Iterator[int]:
    """The last ``TRIES_PER_KIND`` starts of ``boundary`` in ``[floor, reach]``, last first.

    The search looks two characters past ``reach`` (a space cut there looks at what
    follows it) and back before ``floor`` (lookbehinds see the whole text).
    """
    found = boundary.finditer(text, floor, reach + 2)
    positions = [m.start() for m in found if m.start() <= reach]
    yield from reversed(positions[-TRIES_PER_KIND:])


def _clean_cut(tokenizer: Any, text: str, position: int, window: int) -> bool:
    """Whether cutting at ``position`` gives the ids of one encoding around it."""
    left = text[max(0, position - window) : position]
    right = text[position : position + window]
    return _ids(tokenizer, left, False) + _ids(tokenizer, right, False) == _ids(
        tokenizer, left + right, False
    )


def _ids(tokenizer: Any, text: str, add_special: bool) -> list[int]:
    encoded = tokenizer.encode(text, add_special_tokens=add_special)
    return [int(i) for i in encoded.input_ids.data[0]]


def _decode(tokenizer: Any, ids: list[int]) -> str:
    return str(tokenizer.decode(ids, skip_special_tokens=False))
