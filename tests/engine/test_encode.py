"""Whole-prompt encoding past the GGUF tokenizer's own 8,192-token cut.

Real tokenizers: the demo model's GGUF (its context raised to 65,536 in the metadata) gives
GenAI's GGUF tokenizer, which cuts at 8,192; the demo model's IR tokenizer does not cut and
gives the reference ids. A multi-turn chat (special tokens, indentation, blank lines) of
18k tokens must come out id for id the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.worker.encode import PromptTooLongToEncode, encode_whole, encoding_limit
from tests.conftest import TINY_GGUF, TINY_MODEL
from tests.engine import gguf_builder as gb


@pytest.fixture(scope="module")
def gguf_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import openvino_genai as ov_genai

    parts = gb.load(TINY_GGUF).set("qwen2.context_length", gb.U32, gb.u32(65536))
    path = parts.write(Path(tmp_path_factory.mktemp("gguf")) / "demo-64k.gguf")
    return ov_genai.LLMPipeline(str(path), "CPU").get_tokenizer()


def _chat() -> list[dict[str, str]]:
    messages = []
    for i in range(300):
        messages.append(
            {"role": "user", "content": f"Question {i}: {i} squared?\n  Indented\n\nOk."}
        )
        messages.append({"role": "assistant", "content": f"It is {i * i}.\n- item\n"})
    return messages


def test_the_gguf_tokenizer_cuts_and_the_ir_one_does_not(gguf_tokenizer: Any) -> None:
    import openvino_genai as ov_genai

    assert encoding_limit(gguf_tokenizer, 65536) == 8192
    assert encoding_limit(ov_genai.Tokenizer(str(TINY_MODEL)), 65536) is None


def test_a_long_chat_is_encoded_id_for_id_as_the_ir_tokenizer_does(gguf_tokenizer: Any) -> None:
    import openvino_genai as ov_genai

    text = gguf_tokenizer.apply_chat_template(_chat(), add_generation_prompt=True)
    reference = ov_genai.Tokenizer(str(TINY_MODEL)).encode(text, add_special_tokens=False)
    expected = [int(i) for i in reference.input_ids.data[0]]
    assert len(expected) > 2 * 8192
    assert encode_whole(gguf_tokenizer, text, False, 8192) == expected


def test_one_line_past_the_cut_is_refused(gguf_tokenizer: Any) -> None:
    with pytest.raises(PromptTooLongToEncode, match="8192"):
        encode_whole(gguf_tokenizer, "x" * 40000, True, 8192)
