"""Whole-prompt encoding past the GGUF tokenizer's own 8,192-token cut.

Real tokenizers: the demo model's GGUF (its context raised to 65,536 in the metadata) gives
GenAI's GGUF tokenizer, which cuts at 8,192; the demo model's IR tokenizer does not cut and
gives the reference ids. A multi-turn chat (special tokens, indentation, blank lines) of
18k tokens must come out id for id the same, and so must prompts with no line break at all
(minified JSON, one-line code, one long word). Where pieces are cut (``split_points``) is
tested directly: no text lost, no piece too long, the best boundary first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.worker.encode import encode_whole, encoding_limit, split_points
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


def _ir_ids(text: str, add_special: bool) -> list[int]:
    import openvino_genai as ov_genai

    encoded = ov_genai.Tokenizer(str(TINY_MODEL)).encode(text, add_special_tokens=add_special)
    return [int(i) for i in encoded.input_ids.data[0]]


def _minified_json() -> str:
    """Tool schemas as a Qwen-style template writes them: one line, no spaces."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": f"Does thing {i} to the file at path, returning its lines.",
                "parameters": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
                    "required": ["path"],
                },
            },
        }
        for i in range(150)
    ]
    return json.dumps(tools, separators=(",", ":"))


ONE_LINE_PROMPTS = {
    "minified json": _minified_json(),
    "one-line code": "function f(a,b){return a*b+g(a)-h(b);};let x=f(1,2);" * 500,
    "one long word": "x" * 40000,
    "a chat's special tokens": "<|im_start|>user\u00e9t\u00e9 <|im_end|>" * 2500,
}


@pytest.mark.parametrize("name", list(ONE_LINE_PROMPTS))
def test_a_prompt_without_line_breaks_is_encoded_id_for_id(gguf_tokenizer: Any, name: str) -> None:
    """Refused before ("no line breaks"); now the same ids as one uncut encoding."""
    text = ONE_LINE_PROMPTS[name]
    assert "\n" not in text
    expected = _ir_ids(text, add_special=True)
    assert len(expected) > 8192
    assert encode_whole(gguf_tokenizer, text, True, 8192) == expected


def test_a_cut_never_splits_a_special_token(gguf_tokenizer: Any) -> None:
    """Only special tokens and letters: every piece must still end between two tokens."""
    text = "<|im_end|>" * 2 + "ab<|im_end|>" * 6000
    ids = encode_whole(gguf_tokenizer, text, False, 8192)
    assert ids == _ir_ids(text, add_special=False)
    assert ids.count(926) == 6002  # <|im_end|>, each one token


# ---- where the pieces are cut (pure) -------------------------------------------------------


def _pieces(text: str, cuts: list[int]) -> list[str]:
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


def test_a_text_within_a_piece_is_not_cut() -> None:
    assert split_points("short text", 100) == []
    assert split_points("x" * 100, 100) == []


def test_a_line_break_is_preferred_to_a_space() -> None:
    text = "aaaa bbbb\ncccc dddd eeee"
    cuts = split_points(text, 16)
    assert _pieces(text, cuts)[0] == "aaaa bbbb\n"


def test_a_space_is_preferred_to_punctuation() -> None:
    text = "alpha,beta gamma,delta,epsilon,zeta"
    cuts = split_points(text, 20)
    assert _pieces(text, cuts)[0] == "alpha,beta"  # the space goes with the next word


def test_minified_json_is_cut_before_punctuation() -> None:
    text = '{"name":"read_file","arguments":{"path":"a.txt","limit":10}}'
    for piece in _pieces(text, split_points(text, 12))[:-1]:
        assert piece[-1].isalnum(), piece  # the next piece starts with its punctuation


def test_without_any_boundary_the_cut_is_a_character_boundary() -> None:
    text = "é" * 25
    cuts = split_points(text, 10)
    assert cuts == [10, 20]


def test_a_boundary_the_tokenizer_would_change_is_passed_over() -> None:
    text = "one two three four five six"
    refused = text.index(" five")
    cuts = split_points(text, 20, lambda position: position != refused)
    assert _pieces(text, cuts)[0] == "one two three"


def test_when_every_space_is_refused_a_clean_character_boundary_is_next() -> None:
    text = "one two three four five six"
    spaces = {i for i, c in enumerate(text) if c == " "}
    cuts = split_points(text, 20, lambda position: position not in spaces and position != 20)
    assert cuts[0] == 19  # "one two three four f" would cut where the tokenizer objects


def test_no_boundary_accepted_falls_back_to_the_largest_piece() -> None:
    text = "one two three four five six"
    assert split_points(text, 20, lambda _: False)[0] == 20


def test_a_crlf_is_never_cut_in_two() -> None:
    text = "x" * 9 + "\r\n" + "y" * 9
    cuts = split_points(text, 10, lambda _: False)
    assert all(text[c - 1 : c + 1] != "\r\n" for c in cuts)
    assert "".join(_pieces(text, cuts)) == text


def test_max_chars_below_one_is_an_error() -> None:
    with pytest.raises(ValueError, match="max_chars"):
        split_points("abc", 0)


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list('ab \t\n\r,.{}"é<|>')), max_size=400),
    max_chars=st.integers(min_value=2, max_value=40),
)
def test_pieces_join_to_the_text_and_stay_within_the_size(text: str, max_chars: int) -> None:
    cuts = split_points(text, max_chars)
    pieces = _pieces(text, cuts)
    assert "".join(pieces) == text
    assert cuts == sorted(set(cuts)) and all(0 < c < len(text) for c in cuts)
    assert all(len(p) <= max_chars for p in pieces)
    assert all(len(p) >= max_chars // 2 for p in pieces[:-1])  # never tiny pieces
