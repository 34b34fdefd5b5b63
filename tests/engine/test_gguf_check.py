"""Damaged GGUF files are refused with one sentence before GenAI ever opens them.

Each crafted file is the demo model's real GGUF changed in one way (see
``tests/engine/gguf_builder.py``). Before the whole-file check, more than half of them were
accepted: some crashed the engine worker (a huge tensor count, 2^31 dimensions, a tensor past
the end of the file, data cut in half), others loaded and served garbage.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.gguf import GGUFError, read_header, read_metadata
from engine.gguf_check import check_gguf
from engine.models import ModelError, spec_from_path
from tests.conftest import TINY_CODER_GGUF, TINY_GGUF
from tests.engine.gguf_builder import CRAFTED, load


@pytest.mark.parametrize("kind", list(CRAFTED))
def test_crafted_file_is_refused_with_one_sentence(kind: str, tmp_path: Path) -> None:
    craft, expected = CRAFTED[kind]
    path = tmp_path / "model.gguf"
    path.write_bytes(craft(load(TINY_GGUF)))
    with pytest.raises(ModelError) as refused:
        spec_from_path(path)
    message = str(refused.value)
    assert expected in message
    assert message.startswith("model.gguf ") and "\n" not in message, message


def test_at_least_the_kinds_the_issue_lists_are_crafted() -> None:
    assert len(CRAFTED) >= 37


@pytest.mark.parametrize("fixture", [TINY_GGUF, TINY_CODER_GGUF], ids=["demo", "coder"])
def test_valid_files_pass_and_round_trip(fixture: Path) -> None:
    header = check_gguf(fixture)
    assert header.tensors and header.file_size == fixture.stat().st_size
    assert load(fixture).to_bytes() == fixture.read_bytes()
    assert spec_from_path(fixture).architecture == "qwen2"


def test_a_changed_file_is_checked_again(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    data = TINY_GGUF.read_bytes()
    path.write_bytes(data)
    assert check_gguf(path) is check_gguf(path)  # cached while size and mtime hold
    path.write_bytes(data[:-1])
    with pytest.raises(GGUFError, match="ends past the end of the file"):
        check_gguf(path)
    path.write_bytes(data)
    os.utime(path, ns=(1, 1))
    assert check_gguf(path).file_size == len(data)


def test_metadata_reads_stay_bounded(tmp_path: Path) -> None:
    """read_metadata keeps arrays only when asked, and refuses what check_gguf refuses."""
    meta = read_metadata(TINY_GGUF)
    assert meta["tokenizer.ggml.tokens"] == {"array_of": 8, "length": 931}
    whole = read_header(TINY_GGUF, keep_arrays=("tokenizer.ggml.tokens",)).metadata
    assert len(whole["tokenizer.ggml.tokens"]) == 931
    token_types = read_metadata(TINY_GGUF, skip_arrays=False)["tokenizer.ggml.token_type"]
    assert len(token_types) == 931 and set(token_types) <= {1, 3, 4}  # normal, control, user
    craft, _ = CRAFTED["5,000 nested arrays"]
    (tmp_path / "nested.gguf").write_bytes(craft(load(TINY_GGUF)))
    with pytest.raises(GGUFError, match="array of arrays"):
        read_metadata(tmp_path / "nested.gguf")
