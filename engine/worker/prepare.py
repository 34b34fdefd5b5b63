"""Turn a GenerationRequest into prompt token ids and a GenAI GenerationConfig.

Runs in the engine worker, which owns the tokenizer. ``add_request`` does not apply a chat
template, so chat messages are templated here with the model's own template, encoded without
special tokens (the template already holds them) and passed as ids.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from engine.worker.json_grammar import compact_json_grammar
from engine.worker.messages import GenerationRequest, OutputConstraint

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
    opens_reasoning: bool = False


# Fill-in-the-middle token triples (prefix, suffix, middle) of the model families that have them.
FIM_TOKENS = (
    ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),  # Qwen2.5-Coder, StarCoder2
    ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),  # StarCoder, SantaCoder
    (
        "<\uff5cfim\u2581begin\uff5c>",
        "<\uff5cfim\u2581hole\uff5c>",
        "<\uff5cfim\u2581end\uff5c>",
    ),  # DeepSeek
    ("[PREFIX]", "[SUFFIX]", "[MIDDLE]"),  # Codestral
)


def find_fim_tokens(tokenizer: Any) -> tuple[str, str, str] | None:
    """The FIM tokens in the tokenizer's vocabulary, if the model has a whole set."""
    try:
        vocab = tokenizer.get_vocab()
    except Exception:  # an old tokenizer IR without a vocabulary: no FIM
        logger.debug("tokenizer has no vocabulary", exc_info=True)
        return None
    for triple in FIM_TOKENS:
        if all(token.encode("utf-8") in vocab or token in vocab for token in triple):
            return triple
    return None


def prepare(
    request: GenerationRequest,
    tokenizer: Any,
    base_config: Any,
    context_length: int | None,
    fim_tokens: tuple[str, str, str] | None = None,
) -> PreparedRequest:
    """Template, tokenize and size-check a request.

    Raises:
        RequestError: the prompt cannot be templated, the model has no FIM tokens for a
            ``suffix``, or prompt plus ``max_tokens`` exceeds the model's context (never
            truncated silently; with ``cap_max_tokens`` only the prompt must fit, and
            ``max_tokens`` is clipped to the room it leaves).
    """
    text, add_special = _prompt_text(request, tokenizer, fim_tokens)
    encoded = tokenizer.encode(text, add_special_tokens=add_special)
    prompt_ids = [int(i) for i in encoded.input_ids.data[0]]
    opens_reasoning = request.messages is not None and text.rstrip().endswith("<think>")
    if not prompt_ids:
        raise RequestError("invalid_request", "the prompt is empty", "messages")
    prompt_tokens = len(prompt_ids)
    if context_length is not None:
        if (
            request.max_tokens is not None
            and not request.cap_max_tokens
            and prompt_tokens + request.max_tokens > context_length
        ):
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
        if request.cap_max_tokens and context_length is not None:
            max_tokens = min(max_tokens, context_length - prompt_tokens)
    elif context_length is not None:
        max_tokens = context_length - prompt_tokens
    else:
        max_tokens = DEFAULT_MAX_TOKENS_WITHOUT_CONTEXT
    return PreparedRequest(
        prompt_ids, max_tokens, _config(request, base_config, max_tokens), opens_reasoning
    )


def _prompt_text(
    request: GenerationRequest, tokenizer: Any, fim_tokens: tuple[str, str, str] | None
) -> tuple[str, bool]:
    """The prompt text and whether the tokenizer should add its special tokens (BOS)."""
    if request.messages is not None:
        try:
            text = tokenizer.apply_chat_template(
                request.messages,
                add_generation_prompt=True,
                tools=request.tools or None,
                extra_context=request.chat_template_kwargs or None,
            )
        except Exception as exc:
            raise RequestError(
                "invalid_request",
                f"the model's chat template rejected the messages: {exc}",
                "messages",
            ) from exc
        return str(text), False
    prompt = request.prompt or ""
    if request.suffix is None:
        return prompt, True
    if fim_tokens is None:
        raise RequestError(
            "fim_unsupported", "the model has no fill-in-the-middle tokens", "suffix"
        )
    prefix, suffix, middle = fim_tokens
    return f"{prefix}{prompt}{suffix}{request.suffix}{middle}", True


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
    if request.logprobs:
        config.logprobs = 1  # GenAI returns the chosen token's log-probability only
    constraint = request.constraint
    if constraint is not None:
        # A schema XGrammar cannot compile must be refused here: once added, it fails every
        # later pipeline step, for every request.
        config.structured_output_config = _structured(constraint)
    try:
        config.validate()
    except Exception as exc:
        if constraint is not None:
            raise RequestError(
                "invalid_request",
                f"{constraint.param}: the JSON schema cannot be enforced: {_first_line(exc)}",
                constraint.param,
            ) from exc
        raise RequestError("invalid_request", f"invalid sampling parameters: {exc}") from exc
    return config


def _structured(constraint: OutputConstraint) -> Any:
    """GenAI's structured-output config for ``constraint``: compact JSON where we can."""
    import openvino_genai as ov_genai

    so = ov_genai.StructuredOutputConfig
    grammar = _compact_grammar(constraint.json_schema)
    if not constraint.begin and not constraint.end:
        return so(grammar=grammar) if grammar else so(json_schema=constraint.json_schema)
    content = so.EBNF(grammar) if grammar else so.JSONSchema(constraint.json_schema)
    return so(structural_tags_config=so.Tag(constraint.begin, content, constraint.end))


def _compact_grammar(schema_text: str) -> str | None:
    """A grammar for compact JSON, or None to let GenAI's json_schema (free whitespace) do it."""
    try:
        return compact_json_grammar(json.loads(schema_text))
    except ValueError as exc:  # UnsupportedSchema, or (never expected) text that is not JSON
        logger.info("JSON schema enforced with free whitespace (%s)", exc)
        return None


def _first_line(exc: Exception) -> str:
    """The message of a GenAI/XGrammar error without its source location prefix."""
    line = next((ln for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
    return line.rsplit(": ", 1)[-1] if ".cc:" in line or ".cpp:" in line else line


def _base_temperature(base: Any) -> float:
    """The model's default: its generation_config temperature when it samples, else greedy."""
    return float(base.temperature) if base.do_sample else 0.0
