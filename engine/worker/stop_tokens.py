"""Every token a model's own files declare as ending generation.

GenAI stops on the ids it reads itself: an IR folder's ``generation_config.json``
``eos_token_id`` (an int or a list) and the tokenizer's EOS, a GGUF file's
``tokenizer.ggml.eos_token_id`` alone. Models declare more than that: Llama 3 lists three
end ids, gpt-oss ends a turn with ``<|return|>`` or ``<|call|>``, GLM with ``<|user|>``;
some folders list them only in ``config.json`` (transformers reads it when the generation
config is missing), and a GGUF file names its end-of-turn and end-of-message tokens in
``tokenizer.ggml.eot_token_id`` / ``eom_token_id``. Any such id GenAI did not know was a
token the model ran past, or whose text reached the reply.

:func:`declared_eos_ids` gathers them all; the worker makes each one a stop token of every
request and hides it from the text (``Backend.stop_on``). Only ids the files declare are
taken: llama.cpp also guesses end tokens from their text, which would stop gpt-oss at the
``<|end|>`` that closes its analysis channel.

Model files come from outside: a value that is not a token id (negative, a bool, a string,
past the vocabulary) is logged and left out, never trusted. Pure file reading; any thread.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

from engine.gguf import GGUFError, read_metadata
from engine.models import read_json

logger = logging.getLogger(__name__)

ModelFormat = Literal["ir", "gguf"]
# GGUF keys that name a token ending generation (llama.cpp's end-of-generation set).
GGUF_END_KEYS = (
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.eom_token_id",
)
_MAX_IDS = 64  # a real model lists a handful; a longer list is not taken on trust


def declared_eos_ids(path: Path, model_format: ModelFormat) -> frozenset[int]:
    """The end-of-generation token ids the model at ``path`` declares (possibly none)."""
    if model_format == "gguf":
        return _gguf_ids(path)
    return _ir_ids(path)


def _ir_ids(folder: Path) -> frozenset[int]:
    config = read_json(folder / "config.json")
    generation = read_json(folder / "generation_config.json")
    text_config = config.get("text_config")
    sources: list[tuple[str, Any]] = [
        ("generation_config.json", generation.get("eos_token_id")),
        ("config.json", config.get("eos_token_id")),
    ]
    if isinstance(text_config, dict):  # multimodal models keep the language model's here
        sources.append(("config.json text_config", text_config.get("eos_token_id")))
    vocab = _vocab_size(config.get("vocab_size"))
    if vocab is None and isinstance(text_config, dict):
        vocab = _vocab_size(text_config.get("vocab_size"))
    ids: set[int] = set()
    for where, value in sources:
        ids |= token_ids(value, vocab, f"{folder.name}/{where} eos_token_id")
    return frozenset(ids)


def _gguf_ids(file: Path) -> frozenset[int]:
    try:
        meta = read_metadata(file)
    except GGUFError as exc:  # checked before the load; a file that changed since
        logger.warning("cannot read the end tokens of %s: %s", file.name, exc)
        return frozenset()
    tokens = meta.get("tokenizer.ggml.tokens")
    vocab = tokens.get("length") if isinstance(tokens, dict) else None
    ids: set[int] = set()
    for key in GGUF_END_KEYS:
        ids |= token_ids(meta.get(key), _vocab_size(vocab), f"{file.name} {key}")
    return frozenset(ids)


def token_ids(value: Any, vocab: int | None, where: str) -> set[int]:
    """The token ids in ``value`` (an id, a list of ids, or absent); bad entries are logged
    with ``where`` and left out. ``vocab``: ids must be below it, when known."""
    if value is None:
        return set()
    items = value if isinstance(value, list) else [value]
    if len(items) > _MAX_IDS:
        logger.warning("%s lists %d ids; none taken", where, len(items))
        return set()
    ids: set[int] = set()
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            logger.warning("%s: %r is not a token id; left out", where, item)
        elif vocab is not None and item >= vocab:
            logger.warning("%s: %d is past the vocabulary (%d); left out", where, item, vocab)
        else:
            ids.add(item)
    return ids


def _vocab_size(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
