"""Turn a GenerationRequest into prompt token ids and a GenAI GenerationConfig.

Runs in the engine worker, which owns the tokenizer. ``add_request`` does not apply a chat
template, so chat messages are templated here with the model's own template, encoded without
special tokens (the template already holds them) and passed as ids.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from engine.worker.messages import GenerationRequest

logger = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS_WITHOUT_CONTEXT = 4096


class RequestError(Exception):
    """The request cannot run; carries the code and parameter for the client."""

    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.param = param


@dataclass(frozen=True)
class PreparedRequest:
    prompt_ids: list[int]
    max_tokens: int
    config: Any  # openvino_genai.GenerationConfig


def prepare(
    request: GenerationRequest, tokenizer: Any, base_config: Any, context_length: int | None
) -> PreparedRequest:
    """Template, tokenize and size-check a request.

    Raises:
        RequestError: the prompt cannot be templated, or prompt plus ``max_tokens`` exceeds
            the model's context (never truncated silently).
    """
    prompt_ids = _prompt_ids(request, tokenizer)
    if not prompt_ids:
        raise RequestError("invalid_request", "the prompt is empty", "messages")
    prompt_tokens = len(prompt_ids)
    if context_length is not None:
        if request.max_tokens is not None and prompt_tokens + request.max_tokens > context_length:
            raise RequestError(
                "context_length_exceeded",
                f"This model's maximum context length is {context_length} tokens. You requested "
                f"{prompt_tokens + request.max_tokens} tokens ({prompt_tokens} in the messages, "
                f"{request.max_tokens} in the completion). Please reduce the length of the "
                "messages or completion.",
                "max_tokens",
            )
        if prompt_tokens >= context_length:
            raise RequestError(
                "context_length_exceeded",
                f"This model's maximum context length is {context_length} tokens, but the "
                f"prompt has {prompt_tokens} tokens. Please reduce the length of the messages.",
                "messages",
            )
    if request.max_tokens is not None:
        max_tokens = request.max_tokens
    elif context_length is not None:
        max_tokens = context_length - prompt_tokens
    else:
        max_tokens = DEFAULT_MAX_TOKENS_WITHOUT_CONTEXT
    return PreparedRequest(prompt_ids, max_tokens, _config(request, base_config, max_tokens))


def _prompt_ids(request: GenerationRequest, tokenizer: Any) -> list[int]:
    if request.messages is not None:
        try:
            text = tokenizer.apply_chat_template(
                request.messages,
                add_generation_prompt=True,
                extra_context=request.chat_template_kwargs or None,
            )
        except Exception as exc:
            raise RequestError(
                "invalid_request",
                f"the model's chat template rejected the messages: {exc}",
                "messages",
            ) from exc
        add_special = False
    else:
        text = request.prompt or ""
        add_special = True
    encoded = tokenizer.encode(text, add_special_tokens=add_special)
    return [int(i) for i in encoded.input_ids.data[0]]


def _config(request: GenerationRequest, base: Any, max_tokens: int) -> Any:
    import openvino_genai as ov_genai

    s = request.sampling
    config = ov_genai.GenerationConfig()
    config.max_new_tokens = max_tokens
    config.eos_token_id = base.eos_token_id
    config.stop_token_ids = set(base.stop_token_ids)
    config.ignore_eos = s.ignore_eos
    temperature = s.temperature if s.temperature is not None else _base_temperature(base)
    if temperature <= 0:
        config.do_sample = False
    else:
        config.do_sample = True
        config.temperature = temperature
        config.top_p = s.top_p if s.top_p is not None else base.top_p
        config.top_k = s.top_k if s.top_k is not None else base.top_k
        if s.min_p is not None:
            config.min_p = s.min_p
        if s.seed is not None:
            config.rng_seed = s.seed
    if s.presence_penalty is not None:
        config.presence_penalty = s.presence_penalty
    if s.frequency_penalty is not None:
        config.frequency_penalty = s.frequency_penalty
    if s.repetition_penalty is not None:
        config.repetition_penalty = s.repetition_penalty
    try:
        config.validate()
    except Exception as exc:
        raise RequestError("invalid_request", f"invalid sampling parameters: {exc}") from exc
    return config


def _base_temperature(base: Any) -> float:
    """The model's default: its generation_config temperature when it samples, else greedy."""
    return float(base.temperature) if base.do_sample else 0.0
