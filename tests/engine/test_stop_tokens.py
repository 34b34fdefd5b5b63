"""The end tokens a model's files declare (engine.worker.stop_tokens), on real model files."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest

from engine.worker.stop_tokens import declared_eos_ids, token_ids
from tests.engine import gguf_builder as gb

DEMO_EOS = 926  # <|im_end|>, the demo model's eos in every file
DEMO_PAD = 924  # <|endoftext|>, its generation_config's second eos


@pytest.mark.parametrize(
    ("value", "ids"),
    [
        (None, set()),
        (7, {7}),
        ([1, 2, 2, 3], {1, 2, 3}),
        ([], set()),
        (0, {0}),
    ],
)
def test_token_ids_reads_an_id_or_a_list(value: Any, ids: set[int]) -> None:
    assert token_ids(value, 100, "x") == ids


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        (True, set()),  # a bool is not a token id, although Python counts it as an int
        (-1, set()),
        ("</s>", set()),
        (1.0, set()),
        ([5, "x", -2, 100, 99], {5, 99}),  # 100 is past a 100-token vocabulary
        (list(range(65)), set()),  # longer than any real model's list: none trusted
    ],
)
def test_token_ids_leaves_out_what_is_not_an_id_and_says_so(
    value: Any, kept: set[int], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="engine.worker.stop_tokens"):
        assert token_ids(value, 100, "model/config.json eos_token_id") == kept
    assert "model/config.json eos_token_id" in caplog.text


def test_without_a_vocabulary_size_any_id_is_kept() -> None:
    assert token_ids([10**6], None, "x") == {10**6}


def _copy(tiny_model: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(tiny_model, folder)
    return folder


def _edit(file: Path, **fields: Any) -> None:
    data = json.loads(file.read_text()) if file.is_file() else {}
    data.update(fields)
    file.write_text(json.dumps(data))


def test_the_demo_folder_declares_its_two_eos_ids(tiny_model: Path) -> None:
    assert declared_eos_ids(tiny_model, "ir") == {DEMO_EOS, DEMO_PAD}


def test_a_folder_declares_the_union_of_its_generation_config_and_config(
    tiny_model: Path, tmp_path: Path
) -> None:
    folder = _copy(tiny_model, tmp_path)
    _edit(folder / "generation_config.json", eos_token_id=DEMO_EOS)
    _edit(folder / "config.json", eos_token_id=[DEMO_EOS, 13])
    assert declared_eos_ids(folder, "ir") == {DEMO_EOS, 13}


def test_a_folder_without_generation_config_uses_config_and_its_text_config(
    tiny_model: Path, tmp_path: Path
) -> None:
    folder = _copy(tiny_model, tmp_path)
    (folder / "generation_config.json").unlink()
    _edit(folder / "config.json", eos_token_id=None, text_config={"eos_token_id": [1, 106]})
    assert declared_eos_ids(folder, "ir") == {1, 106}


def test_ids_past_the_vocabulary_are_left_out(tiny_model: Path, tmp_path: Path) -> None:
    folder = _copy(tiny_model, tmp_path)
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    _edit(folder / "generation_config.json", eos_token_id=[DEMO_EOS, vocab, vocab + 5])
    assert declared_eos_ids(folder, "ir") == {DEMO_EOS}


def test_a_gguf_declares_its_eos_eot_and_eom_ids(tiny_gguf: Path, tmp_path: Path) -> None:
    assert declared_eos_ids(tiny_gguf, "gguf") == {DEMO_EOS}
    parts = (
        gb.load(tiny_gguf)
        .set("tokenizer.ggml.eot_token_id", gb.U32, gb.u32(13))
        .set("tokenizer.ggml.eom_token_id", gb.U32, gb.u32(11))
    )
    crafted = parts.write(tmp_path / "ends.gguf")
    assert declared_eos_ids(crafted, "gguf") == {DEMO_EOS, 13, 11}
    past = gb.load(tiny_gguf).set("tokenizer.ggml.eot_token_id", gb.U32, gb.u32(5000))
    assert declared_eos_ids(past.write(tmp_path / "past.gguf"), "gguf") == {DEMO_EOS}


def test_a_gguf_that_cannot_be_read_declares_nothing(tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF\x03\x00")
    assert declared_eos_ids(broken, "gguf") == frozenset()
