"""A token-id -> bytes table for byte-level BPE tokenizers (Qwen, Llama 3, GPT-2 families).

Why: GenAI's ``Tokenizer.decode`` runs the OpenVINO detokenizer model, 50-300 us a call,
and incremental detokenization calls it twice per token on the worker's step loop, where
every microsecond delays the next ``step()`` (about 3.5 % of decode time on a 2-core
laptop). For byte-level BPE, decoding is concatenating each token's bytes, so a table built
once from ``tokenizer.json`` does it in microseconds.

The table is only used when it provably decodes like GenAI: the decoder must be plain
``ByteLevel``, and a probe text (spaces before punctuation, contractions, multi-byte
characters, every added token) must decode identically both ways. Otherwise the caller
keeps GenAI's decoder.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

# What detokenizer clean-ups and special cases would change; decoded both ways at load.
PROBE = (
    "Hello , world . Isn 't it ? Yes ! I 'm sure , we 're fine ; he 's ok - \"quoted\" "
    "(x) [y] {z} a\tb\nc  d   e 你好\uff0c世界\uff01🌍✨ café naïve Ünïcödé 1.5e-3 $100 #tag @me"
)


def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable stand-in for each byte, reversed (char -> byte)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def read_byte_table(model_dir: Path) -> dict[int, bytes] | None:
    """The table from ``model_dir/tokenizer.json``, or ``None`` if it is not byte-level."""
    path = model_dir / "tokenizer.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    decoder = data.get("decoder") or {}
    model = data.get("model") or {}
    if decoder.get("type") != "ByteLevel" or model.get("type") != "BPE":
        return None
    to_byte = _byte_decoder()
    table: dict[int, bytes] = {}
    for piece, token_id in (model.get("vocab") or {}).items():
        try:
            table[int(token_id)] = bytes(to_byte[c] for c in piece)
        except KeyError:  # not a byte-level piece: this is not the tokenizer we think
            return None
    for added in data.get("added_tokens") or []:
        table[int(added["id"])] = str(added["content"]).encode("utf-8")
    return table


def verified_byte_table(model_dir: Path, tokenizer: Any) -> dict[int, bytes] | None:
    """:func:`read_byte_table`, kept only if it decodes the probe exactly like ``tokenizer``."""
    table = read_byte_table(model_dir)
    if table is None:
        return None
    added = [t for t in table.values() if t.startswith(b"<") and t.endswith(b">")]
    probe = PROBE + "".join(t.decode("utf-8", "replace") for t in added[:64])
    try:
        ids = [int(i) for i in tokenizer.encode(probe, add_special_tokens=False).input_ids.data[0]]
        expected = str(tokenizer.decode(ids, skip_special_tokens=False))
    except Exception:  # a tokenizer we cannot probe keeps its own decoder
        logger.debug("could not probe the tokenizer", exc_info=True)
        return None
    if any(i not in table for i in ids):
        return None
    ours = b"".join(table[i] for i in ids).decode("utf-8", "replace")
    if ours != expected:
        logger.info("byte table differs from the model's detokenizer; using the detokenizer")
        return None
    return table
