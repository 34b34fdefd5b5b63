"""The byte table decodes exactly like GenAI's detokenizer, incrementally too.

Real tokenizers (the demo and code models' OpenVINO tokenizers); the table path is what the
worker uses for them, so it must never differ from GenAI's own decode.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import openvino_genai as ov_genai
import pytest

from engine.worker.bytelevel import read_byte_table, verified_byte_table
from engine.worker.textstream import IncrementalDetokenizer
from tests.conftest import TINY_CODER, TINY_MODEL

ROOT = Path(__file__).parents[2]
DEMO = TINY_MODEL


def _texts() -> list[str]:
    dialogues = json.loads((ROOT / "tests" / "models" / "dialogues.json").read_text("utf-8"))
    replies = [d["reply"] for d in dialogues["dialogues"] if d.get("reply")]
    return [
        *replies,
        "你好\uff0c世界\uff01🌍✨ naïve café, e = mc² ≠ 1/0 — “quotes” \u2018single\u2019 … 日本語のテキスト",
        '<think>plan</think>answer <tool_call>{"name": "f"}</tool_call>',
        "def f(x):\n\treturn x ** 2  # squared\n\n\nprint(f(3))",
    ]


def _stream(detok: IncrementalDetokenizer, ids: list[int], rng: random.Random) -> list[str]:
    pieces, at = [], 0
    while at < len(ids):
        size = rng.choice([1, 1, 1, 2, 3])
        pieces.append(detok.push(ids[at : at + size]))
        at += size
    pieces.append(detok.finish())
    return pieces


@pytest.mark.parametrize("model_dir", [DEMO, TINY_CODER], ids=["demo", "coder"])
def test_table_streams_exactly_what_genai_decodes(model_dir: Path) -> None:
    tokenizer: Any = ov_genai.Tokenizer(str(model_dir))
    table = verified_byte_table(model_dir, tokenizer)
    assert table is not None
    rng = random.Random(7)
    for text in _texts():
        ids = [int(i) for i in tokenizer.encode(text, add_special_tokens=False).input_ids.data[0]]
        expected = str(tokenizer.decode(ids, skip_special_tokens=False))
        fast = _stream(IncrementalDetokenizer(tokenizer, table=table), ids, rng)
        slow = _stream(IncrementalDetokenizer(tokenizer), ids, rng)
        assert "".join(fast) == "".join(slow) == expected
        assert not any("\ufffd" in piece for piece in fast)  # never half a character
        for token in ids[:5]:
            fast_one = IncrementalDetokenizer(tokenizer, table=table).token_text(token)
            assert fast_one == IncrementalDetokenizer(tokenizer).token_text(token)


def test_stop_strings_work_on_the_table_path() -> None:
    tokenizer: Any = ov_genai.Tokenizer(str(DEMO))
    table = verified_byte_table(DEMO, tokenizer)
    assert table is not None  # else this would test the detokenizer path
    ids = [int(i) for i in tokenizer.encode("one two STOP three").input_ids.data[0]]
    detok = IncrementalDetokenizer(tokenizer, ("STOP",), table=table)
    text = "".join(detok.push([i]) for i in ids) + detok.finish()
    assert text == "one two " and detok.stop.matched


def test_only_byte_level_bpe_gets_a_table(tmp_path: Path) -> None:
    assert read_byte_table(ROOT / "tests" / "fixtures" / "tiny-embed") is None  # WordPiece
    assert read_byte_table(tmp_path) is None  # no tokenizer.json (e.g. a GGUF file's folder)
    data = json.loads((DEMO / "tokenizer.json").read_text("utf-8"))
    data["decoder"] = {"type": "Metaspace", "replacement": "\u2581"}
    (tmp_path / "tokenizer.json").write_text(json.dumps(data), "utf-8")
    assert read_byte_table(tmp_path) is None


def test_a_table_that_disagrees_with_the_detokenizer_is_not_used(tmp_path: Path) -> None:
    """A tokenizer.json that does not match the model's detokenizer (here: one piece
    changed) must never be trusted over the detokenizer itself."""
    tokenizer: Any = ov_genai.Tokenizer(str(DEMO))
    data = json.loads((DEMO / "tokenizer.json").read_text("utf-8"))
    vocab = data["model"]["vocab"]
    hello = int(tokenizer.encode("Hello", add_special_tokens=False).input_ids.data[0][0])
    piece = next(p for p, i in vocab.items() if i == hello)
    vocab[piece + "x"] = vocab.pop(piece)  # the same id now decodes to other bytes
    (tmp_path / "tokenizer.json").write_text(json.dumps(data), "utf-8")
    assert read_byte_table(tmp_path) is not None
    assert verified_byte_table(tmp_path, tokenizer) is None
