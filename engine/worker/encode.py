"""Encode a whole prompt, even with a tokenizer that truncates on its own.

GenAI's tokenizer built from a GGUF file cuts every encoding at 8,192 tokens and ignores
``max_length``/``truncation`` (measured with openvino-genai 2026.x: a 20,000-token prompt came
back as 8,192 ids with ``truncation=False`` and with ``max_length=100000``). Served as-is, a
GGUF model with a 32k context answered a 20k prompt from its last 8k tokens and reported
``prompt_tokens: 8192``. Nothing here truncates: :func:`encoding_limit` measures the cap once
per loaded tokenizer, and :func:`encode_whole` encodes a longer text in pieces split where a
byte-level BPE pre-tokenizer always splits (after a newline that a non-space character
follows), checking that each piece decodes back to itself; a text it cannot split that way
is refused (:class:`PromptTooLongToEncode`), never cut.

Runs in the engine worker (the tokenizer's owner), on the worker's one command thread.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

logger = logging.getLogger(__name__)

# How far a tokenizer's cap is probed: beyond every context the engine serves.
PROBE_TOKENS_MAX = 1 << 20
# One character is at most this many tokens (UTF-8 bytes, byte-fallback vocabularies).
TOKENS_PER_CHAR_MAX = 4
_SPLIT = re.compile(r"\n(?=\S)")


class PromptTooLongToEncode(Exception):
    """The tokenizer caps encodings and the text cannot be split safely below its cap."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the prompt has more than {limit} tokens, the most this model's tokenizer encodes "
            "at once, and it has no line breaks to encode it in pieces"
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
        PromptTooLongToEncode: the tokenizer caps encodings at ``limit`` and ``text`` cannot
            be split into pieces each below it that decode back to themselves.
    """
    ids = _ids(tokenizer, text, add_special)
    if limit is None or len(ids) < limit:
        return ids
    pieces = _pieces(text, max(1, (limit - 8) // TOKENS_PER_CHAR_MAX), limit)
    out: list[int] = []
    for index, piece in enumerate(pieces):
        piece_ids = _ids(tokenizer, piece, add_special and index == 0)
        if len(piece_ids) >= limit:
            raise PromptTooLongToEncode(limit)
        if index > 0 and _decode(tokenizer, piece_ids) != piece:
            raise PromptTooLongToEncode(limit)  # a piece boundary changed the text
        out.extend(piece_ids)
    return out


def _pieces(text: str, max_chars: int, limit: int) -> list[str]:
    """``text`` cut after newlines into pieces of at most ``max_chars`` characters."""
    cuts = [m.end() for m in _SPLIT.finditer(text)]
    pieces: list[str] = []
    start = 0
    last_cut = 0
    for cut in [*cuts, len(text)]:
        if cut - start > max_chars:
            if last_cut <= start:
                raise PromptTooLongToEncode(limit)
            pieces.append(text[start:last_cut])
            start = last_cut
            if cut - start > max_chars:
                raise PromptTooLongToEncode(limit)
        last_cut = cut
    pieces.append(text[start:])
    return [p for p in pieces if p]


def _ids(tokenizer: Any, text: str, add_special: bool) -> list[int]:
    encoded = tokenizer.encode(text, add_special_tokens=add_special)
    return [int(i) for i in encoded.input_ids.data[0]]


def _decode(tokenizer: Any, ids: list[int]) -> str:
    return str(tokenizer.decode(ids, skip_special_tokens=False))
