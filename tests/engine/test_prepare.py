"""The worker's request preparation (FIM prompts, the completion's room) with the real
tokenizers GenAI loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openvino_genai as ov_genai
import pytest

from engine.worker.messages import GenerationRequest
from engine.worker.prepare import (
    DEFAULT_MAX_TOKENS_WITHOUT_CONTEXT,
    FIM_TOKENS,
    RequestError,
    completion_room,
    find_fim_tokens,
    prepare,
)
from tests.conftest import TINY_CODER, TINY_CODER_GGUF


def _tokenizer(path: Path) -> Any:
    # GenAI builds a GGUF file's tokenizer together with its pipeline.
    pipe = ov_genai.LLMPipeline(str(path), "CPU")
    return pipe.get_tokenizer(), pipe.get_generation_config()


@pytest.mark.parametrize("path", [TINY_CODER, TINY_CODER_GGUF], ids=["ir", "gguf"])
def test_suffix_becomes_single_fim_tokens(path: Path) -> None:
    """Each FIM marker is one token, although ``prepare`` encodes with add_special_tokens."""
    tokenizer, config = _tokenizer(path)
    fim = find_fim_tokens(tokenizer)
    assert fim == FIM_TOKENS[0]
    fim_ids = [int(tokenizer.encode(t).input_ids.data[0][0]) for t in fim]
    prefix, suffix = "def add(a, b):\n    ", "\n\nprint(add(1, 2))"
    prepared = prepare(
        GenerationRequest(request_id=1, prompt=prefix, suffix=suffix), tokenizer, config, 2048, fim
    )
    ids = prepared.prompt_ids
    # <|fim_prefix|> prefix <|fim_suffix|> suffix <|fim_middle|>: each marker one token.
    assert ids[0] == fim_ids[0] and ids[-1] == fim_ids[2]
    assert ids.count(fim_ids[1]) == 1
    split = ids.index(fim_ids[1])
    assert tokenizer.decode(ids[1:split]) == prefix
    assert tokenizer.decode(ids[split + 1 : -1]) == suffix


@pytest.mark.parametrize("fixture", ["tiny_model", "tiny_gguf"])
def test_suffix_without_fim_tokens_is_refused(fixture: str, request: pytest.FixtureRequest) -> None:
    tokenizer, config = _tokenizer(request.getfixturevalue(fixture))  # the demo model
    assert find_fim_tokens(tokenizer) is None
    with pytest.raises(RequestError) as refused:
        prepare(
            GenerationRequest(request_id=1, prompt="def f(", suffix=")"), tokenizer, config, 2048
        )
    assert refused.value.code == "fim_unsupported" and refused.value.param == "suffix"


@pytest.mark.parametrize(
    ("wanted", "prompt", "context", "room"),
    [
        (64_000, 1_000, 32_768, 31_768),  # qwen-code's retry on a 32k model: clipped
        (8_000, 30_000, 32_768, 2_768),  # its first try, with a long conversation
        (100, 1_000, 32_768, 100),  # within the room: as asked
        (2_048, 2_047, 2_048, 1),  # one token left
        (None, 1_000, 32_768, 31_768),  # no limit: the rest of the context
        (None, 10, None, DEFAULT_MAX_TOKENS_WITHOUT_CONTEXT),  # no context known
        (50_000, 10, None, 50_000),
    ],
)
def test_completion_room_clips_the_limit_to_the_context(
    wanted: int | None, prompt: int, context: int | None, room: int
) -> None:
    assert completion_room(wanted, prompt, context) == room


def test_prepare_clips_max_tokens_and_refuses_only_a_prompt_that_fills_the_context(
    tiny_model: Path,
) -> None:
    tokenizer, config = _tokenizer(tiny_model)
    messages = [{"role": "user", "content": "Hello"}]
    prepared = prepare(
        GenerationRequest(request_id=1, messages=messages, max_tokens=64_000),
        tokenizer,
        config,
        2048,
    )
    assert prepared.max_tokens == 2048 - len(prepared.prompt_ids)
    assert prepared.config.max_new_tokens == prepared.max_tokens
    with pytest.raises(RequestError) as refused:
        prepare(
            GenerationRequest(request_id=1, messages=messages, max_tokens=1),
            tokenizer,
            config,
            len(prepared.prompt_ids),
        )
    assert refused.value.code == "context_length_exceeded" and refused.value.param == "messages"
    assert f"prompt has {len(prepared.prompt_ids)} tokens" in str(refused.value)
