"""Turn a GenerationRequest into prompt token ids and a GenAI GenerationConfig.

Runs in the engine worker, which owns the tokenizer. ``add_request`` does not apply a chat
template, so chat messages are templated here with the model's own template, encoded without
special tokens (the template already holds them) and passed as ids.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from engine.parsing.tool_parsers import grammar as g
from engine.parsing.tool_parsers.grammar import Node as GrammarNode
from engine.parsing.tool_parsers.grammar import node_strings
from engine.worker.encode import PromptTooLongToEncode, encode_whole
from engine.worker.errors import short_error
from engine.worker.jinja_template import TemplateRefused, render_prompt
from engine.worker.json_grammar import compact_json_grammar
from engine.worker.messages import GenerationRequest, ImageInput, OutputConstraint, RejectCode
from engine.worker.vision import TAG_PREFIX, ImageTokens, image_tag, with_image_tags, without_tags

logger = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS_WITHOUT_CONTEXT = 4096
# GenAI keeps seeds, top_k and max_new_tokens in C++ size_t / uint64 fields: a Python int
# outside [0, 2**64) does not convert (a TypeError that used to end the worker).
UINT64_LIMIT = 2**64
NO_TOP_K = UINT64_LIMIT - 1  # GenAI's "no top-k limit"
# XGrammar's compile time grows steeply with nesting (a schema 240 objects deep took seconds,
# 400 deep half a minute, all of it blocking every stream), and real schemas stay far below.
MAX_SCHEMA_NESTING = 128  # JSON objects and arrays inside one another
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


class RequestError(Exception):
    """The request cannot run; carries the code and parameter for the client."""

    def __init__(self, code: RejectCode, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.param = param


@dataclass(frozen=True)
class PreparedRequest:
    prompt_ids: list[int]
    max_tokens: int
    config: Any  # openvino_genai.GenerationConfig
    opens_reasoning: bool = False
    grammar_key: str | None = None  # the constraint's grammar (see structured_config)
    # A vision-language model's request: the templated prompt with image tags (what
    # add_request takes), its images and the tokens they cost (engine.worker.vision).
    prompt_text: str | None = None
    images: tuple[ImageInput, ...] = ()
    image_tokens: int = 0
    # The constraint as it applies to this prompt (OutputConstraint.for_prompt): the one the
    # grammar probe compiles, whose grammar grammar_key names.
    constraint: OutputConstraint | None = None

    @property
    def prompt_tokens(self) -> int:
        """The prompt's tokens, its images' included."""
        return len(self.prompt_ids) + self.image_tokens


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
    encoding_limit: int | None = None,
    prompt_limit: int | None = None,
    image_tokens: ImageTokens | None = None,
) -> PreparedRequest:
    """Template, tokenize and size-check a request.

    ``image_tokens`` is a vision-language model's image-token rule (None: the model reads
    text only, and a request with images is refused): the prompt keeps GenAI's image tags,
    which the text cannot hold, and its images count toward its tokens.

    Raises:
        RequestError: the prompt cannot be templated, the model has no FIM tokens for a
            ``suffix``, or the prompt alone fills the model's context (never truncated
            silently; ``max_tokens`` is clipped to the room the prompt leaves, see
            :func:`completion_room`; with ``count_only`` nothing must fit), or a field
            holds a value the
            engine cannot take (text that is not valid Unicode, a number out of range).
            ``encoding_limit`` is the tokenizer's own cap (see engine.worker.encode): the
            prompt is encoded whole past it, or refused. ``prompt_limit`` (NPU: the static
            ``MAX_PROMPT_LEN``) refuses a longer prompt, naming both numbers.
    """
    _check_text(request)
    if request.constraint is not None:
        _check_schema_nesting(request.constraint)
    if request.max_tokens is not None and not 0 < request.max_tokens < UINT64_LIMIT:
        raise RequestError(
            "invalid_request",
            f"max_tokens must be a positive integer below 2**64, got {request.max_tokens}",
            "max_tokens",
        )
    images = request.images
    if image_tokens is None and images:
        raise RequestError("invalid_request", "this model cannot see images", "messages")
    if image_tokens is not None:
        _check_no_image_tags(request)
    text, add_special = _prompt_text(request, tokenizer, fim_tokens)
    if images and request.messages is None:
        text = "".join(image_tag(i) for i in range(len(images))) + text
    counted = without_tags(text, len(images)) if images else text
    prompt_ids = _encode(tokenizer, counted, add_special, encoding_limit) if counted else []
    opens_reasoning = request.messages is not None and text.rstrip().endswith("<think>")
    if not prompt_ids and not images:
        raise RequestError("invalid_request", "the prompt is empty", "messages")
    pictures = sum(image_tokens(i.width, i.height) for i in images) if image_tokens else 0
    prompt_tokens = len(prompt_ids) + pictures
    context_length = _request_context(context_length, request.context_limit)
    if not request.count_only:
        _check_prompt_limit(prompt_tokens, prompt_limit)
    if context_length is not None and not request.count_only and prompt_tokens >= context_length:
        raise RequestError(
            "context_length_exceeded",
            f"This model's maximum context length is {context_length} tokens, but the "
            f"prompt has {prompt_tokens} tokens. Please reduce the length of the messages.",
            "messages",
        )
    if request.count_only:
        max_tokens = 1  # nothing is generated
    else:
        max_tokens = completion_room(request.max_tokens, prompt_tokens, context_length)
    if request.constraint is not None:  # a call grammar may depend on an opened <think>
        request = replace(request, constraint=request.constraint.for_prompt(opens_reasoning))
    config, grammar_key = _config(request, base_config, max_tokens)
    constraint = request.constraint
    if image_tokens is None:
        return PreparedRequest(
            prompt_ids, max_tokens, config, opens_reasoning, grammar_key, constraint=constraint
        )
    config.apply_chat_template = False  # templated above, tags and all
    return PreparedRequest(
        prompt_ids,
        max_tokens,
        config,
        opens_reasoning,
        grammar_key,
        text,
        images,
        pictures,
        constraint,
    )


def _check_no_image_tags(request: GenerationRequest) -> None:
    """Text that spells GenAI's image tag would take another image's place: refused."""
    for param, value in (("messages", request.messages), ("prompt", request.prompt)):
        for text in _strings(value):
            if TAG_PREFIX in text:
                raise RequestError(
                    "invalid_request",
                    f"{param} holds the text {TAG_PREFIX!r}, which this model reserves for "
                    "images; remove it",
                    param,
                )


def completion_room(wanted: int | None, prompt_tokens: int, context_length: int | None) -> int:
    """The completion's token budget: ``max_tokens`` clipped to the room the prompt leaves.

    One rule for every dialect (OpenAI ``max_tokens``/``max_completion_tokens``, Responses
    ``max_output_tokens``, Anthropic ``max_tokens``, Ollama ``num_predict``, LM Studio
    ``max_output_tokens``): the value is an upper bound, never a demand, so a client that
    asks for more than the context holds (qwen-code sends 8,000 and then 64,000) gets a
    reply that ends with finish reason ``length`` where the context fills up, as
    llama-server does. Without a value the room is the whole rest of the context. The
    caller has checked that the prompt leaves room (``prompt_tokens < context_length``).
    """
    if context_length is None:
        return DEFAULT_MAX_TOKENS_WITHOUT_CONTEXT if wanted is None else wanted
    room = context_length - prompt_tokens
    return room if wanted is None else min(wanted, room)


def _request_context(served: int | None, requested: int | None) -> int | None:
    """The context this request runs in: the served one, lowered by ``num_ctx``."""
    if requested is None:
        return served
    return requested if served is None else min(served, requested)


def _check_prompt_limit(prompt_tokens: int, prompt_limit: int | None) -> None:
    if prompt_limit is not None and prompt_tokens > prompt_limit:
        raise RequestError(
            "context_length_exceeded",
            f"This model takes prompts of at most {prompt_limit} tokens on this device "
            f"(the NPU's MAX_PROMPT_LEN), but the prompt has {prompt_tokens} tokens. "
            "Please reduce the length of the messages.",
            "messages",
        )


def _encode(tokenizer: Any, text: str, add_special: bool, limit: int | None) -> list[int]:
    try:
        return encode_whole(tokenizer, text, add_special, limit)
    except PromptTooLongToEncode as exc:
        raise RequestError("context_length_exceeded", str(exc), "messages") from exc
    except Exception as exc:
        raise RequestError(
            "invalid_request", f"the prompt cannot be tokenized: {short_error(exc)}", "messages"
        ) from exc


def _prompt_text(
    request: GenerationRequest, tokenizer: Any, fim_tokens: tuple[str, str, str] | None
) -> tuple[str, bool]:
    """The prompt text and whether the tokenizer should add its special tokens (BOS)."""
    if request.messages is not None:
        try:
            text = render_prompt(
                tokenizer,
                with_image_tags(request.messages),
                tools=request.tools or None,
                extra_context=request.chat_template_kwargs or None,
            )
        except TemplateRefused as refused:
            raise RequestError(
                "invalid_request",
                f"the model's chat template rejected the messages: {refused}",
                "messages",
            ) from refused
        return text, False
    prompt = request.prompt or ""
    if request.suffix is None:
        return prompt, True
    if fim_tokens is None:
        raise RequestError(
            "fim_unsupported", "the model has no fill-in-the-middle tokens", "suffix"
        )
    prefix, suffix, middle = fim_tokens
    return f"{prefix}{prompt}{suffix}{request.suffix}{middle}", True


def _check_text(request: GenerationRequest) -> None:
    """Refuse text that is not valid Unicode (a lone UTF-16 surrogate such as ``"\\ud800"``).

    JSON allows ``"\\ud800"`` and Python keeps it, but it has no UTF-8 form, so the tokenizer
    and the chat template (C++) cannot take it.
    """
    fields: dict[str, Any] = {
        "messages": request.messages,
        "prompt": request.prompt,
        "suffix": request.suffix,
        "stop": request.stop,
        "tools": request.tools,
        "chat_template_kwargs": request.chat_template_kwargs,
    }
    if request.constraint is not None:
        c = request.constraint
        fields[c.param] = (c.json_schema, c.begin, c.end, c.trigger)
        if c.structure is not None:
            fields[c.param] += tuple(node_strings(c.structure))
    for param, value in fields.items():
        for text in _strings(value):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise RequestError(
                    "invalid_request",
                    f"{param} holds text that is not valid Unicode (a lone surrogate "
                    f"{text[exc.start]!r}); encode it as a whole character",
                    param,
                ) from exc


def _check_schema_nesting(constraint: OutputConstraint) -> None:
    depth = deepest = 0
    for char in _JSON_STRING.sub("", constraint.json_schema):
        if char in "{[":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "}]":
            depth -= 1
    if deepest > MAX_SCHEMA_NESTING:
        raise RequestError(
            "invalid_request",
            f"{constraint.param}: the JSON schema is nested too deeply ({deepest} levels; "
            f"at most {MAX_SCHEMA_NESTING})",
            constraint.param,
        )


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON-like value (keys too), without recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def _sampling_values(request: GenerationRequest, base: Any) -> tuple[int | None, int]:
    """The request's seed and top_k in the ranges GenAI's C++ fields hold.

    A negative seed means "random", as OpenAI's and llama.cpp's ``seed: -1`` do; top_k 0 or
    less means "no limit" (Ollama, llama.cpp), and so does one beyond any vocabulary.

    Raises:
        RequestError: a seed of 2**64 or more, or a float setting that is not finite.
    """
    s = request.sampling
    for name in (
        "temperature",
        "top_p",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
    ):
        value = getattr(s, name)
        if value is not None and not math.isfinite(value):
            raise RequestError("invalid_request", f"{name} must be a finite number", name)
    seed = s.seed
    if seed is not None and seed >= UINT64_LIMIT:
        raise RequestError("invalid_request", "seed must be below 2**64", "seed")
    if seed is not None and seed < 0:
        seed = secrets.randbits(63)
    top_k = s.top_k if s.top_k is not None else int(base.top_k)
    if top_k <= 0 or top_k >= UINT64_LIMIT:
        top_k = NO_TOP_K
    return seed, top_k


def _config(request: GenerationRequest, base: Any, max_tokens: int) -> tuple[Any, str | None]:
    """The request's GenerationConfig, and its grammar's key when it has a constraint."""
    import openvino_genai as ov_genai

    s = request.sampling
    seed, top_k = _sampling_values(request, base)
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
        config.top_k = top_k
        if s.min_p is not None:
            config.min_p = s.min_p
        if seed is not None:
            config.rng_seed = seed
    if s.presence_penalty is not None:
        config.presence_penalty = s.presence_penalty
    if s.frequency_penalty is not None:
        config.frequency_penalty = s.frequency_penalty
    if s.repetition_penalty is not None:
        config.repetition_penalty = s.repetition_penalty
    if request.logprobs:
        config.logprobs = 1  # GenAI returns the chosen token's log-probability only
    try:
        config.validate()
    except Exception as exc:
        raise RequestError(
            "invalid_request", f"invalid sampling parameters: {short_error(exc)}"
        ) from exc
    constraint = request.constraint
    if constraint is None:
        return config, None
    # validate() checks the schema's JSON, not its grammar: the worker's GrammarProbe
    # compiles that (in a child of its own) before the request may reach the pipeline.
    structured = structured_config(constraint)
    config.structured_output_config = structured.config
    try:
        config.validate()
    except Exception as exc:
        if constraint.lazy:  # optional: the request runs as the client sent it
            logger.warning("tool-call grammar dropped (%s): calls unconstrained", short_error(exc))
            config.structured_output_config = None
            return config, None
        raise RequestError(
            "invalid_request",
            f"{constraint.param}: the JSON schema cannot be enforced: {short_error(exc)}",
            constraint.param,
        ) from exc
    return config, structured.key


class StructuredGrammar(NamedTuple):
    """A constraint as GenAI takes it, and the identity of the grammar XGrammar compiles."""

    config: Any  # openvino_genai.StructuredOutputConfig
    key: str  # sha256 of the grammar text and its begin/end: the probe's cache key
    size: int  # the grammar text's length


def structured_config(constraint: OutputConstraint) -> StructuredGrammar:
    """GenAI's structured-output config for ``constraint``: compact JSON where we can."""
    import openvino_genai as ov_genai

    so = ov_genai.StructuredOutputConfig
    if constraint.structure is not None:
        text = repr(constraint.structure)
        key = hashlib.sha256(("structure\0" + text).encode("utf-8", "replace")).hexdigest()
        return StructuredGrammar(
            so(structural_tags_config=structural_tag(constraint.structure)), key, len(text)
        )
    grammar = _compact_grammar(constraint.json_schema)
    kind, text = ("ebnf", grammar) if grammar else ("json_schema", constraint.json_schema)
    parts: tuple[str, ...] = (kind, constraint.begin, constraint.end, text)
    if constraint.lazy:
        parts += ("lazy", constraint.trigger, "single" if constraint.single else "many")
    key = hashlib.sha256("\0".join(parts).encode("utf-8", "replace")).hexdigest()
    if not constraint.begin and not constraint.end:
        config = so(grammar=grammar) if grammar else so(json_schema=constraint.json_schema)
        return StructuredGrammar(config, key, len(text))
    content = so.EBNF(grammar) if grammar else _json_element(constraint.json_schema, whole=False)
    tag = so.Tag(constraint.begin, content, constraint.end)
    if constraint.lazy:
        # Free text until the trigger; then every call in the family's syntax.
        lazy = so.TriggeredTags([constraint.trigger], [tag], False, constraint.single)
        return StructuredGrammar(so(structural_tags_config=lazy), key, len(text))
    return StructuredGrammar(so(structural_tags_config=tag), key, len(text))


def structural_tag(node: GrammarNode) -> Any:
    """A family's call grammar (:mod:`engine.parsing.tool_parsers.grammar`) as GenAI's
    structural tags; JSON as compact JSON where the schema allows (see ``json_grammar``)."""
    import openvino_genai as ov_genai

    so = ov_genai.StructuredOutputConfig
    if isinstance(node, g.Const | g.Json | g.Pattern | g.Ebnf | g.Text):
        return _leaf(node)
    if isinstance(node, g.Tag):
        return so.Tag(node.begin, structural_tag(node.content), node.end)
    if isinstance(node, g.Seq | g.OneOf):
        parts = node.parts if isinstance(node, g.Seq) else node.options
        items = [structural_tag(item) for item in parts]
        if len(items) == 1:  # GenAI's Concat and Union take two or more
            return items[0]
        return so.Concat(items) if isinstance(node, g.Seq) else so.Union(items)
    tags = [structural_tag(tag) for tag in node.tags]
    if isinstance(node, g.Repeat):  # one or more
        return so.TagsWithSeparator(tags, node.separator, True, node.single)
    return so.TriggeredTags(list(node.triggers), tags, False, node.single)


def _leaf(node: g.Const | g.Json | g.Pattern | g.Ebnf | g.Text) -> Any:
    import openvino_genai as ov_genai

    so = ov_genai.StructuredOutputConfig
    if isinstance(node, g.Const):
        return so.ConstString(node.text)
    if isinstance(node, g.Pattern):
        return so.Regex(node.regex)
    if isinstance(node, g.Text):
        return so.AnyText()
    if isinstance(node, g.Ebnf):
        return so.EBNF(node.grammar)
    return _json_element(node.schema)


def _json_element(schema_text: str, whole: bool = True) -> Any:
    """A JSON value valid against the schema, as a structural-tag element: compact JSON
    (``json_grammar``) where the schema allows; else, for a union such as the tools of a
    call (``{"anyOf": [tool, tool, ...]}``), each branch on its own, so one tool outside
    the compact subset does not send every tool to XGrammar's JSON schema (whose compile
    takes seconds per tool set on a 150k vocabulary, and an agent pays it whenever its tool
    set changes); else GenAI's ``JSONSchema``. ``whole=False``: the caller already tried
    the whole schema."""
    import openvino_genai as ov_genai

    so = ov_genai.StructuredOutputConfig
    grammar = _compact_grammar(schema_text) if whole else None
    if grammar:
        return so.EBNF(grammar)
    branches = _union_branches(schema_text)
    if branches:
        return so.Union([_json_element(json.dumps(branch)) for branch in branches])
    return so.JSONSchema(schema_text)


def _union_branches(schema_text: str) -> list[Any] | None:
    """The branches of a schema that is only an ``anyOf``/``oneOf`` (annotations aside),
    or None. Not when the root holds ``$defs``: a branch's ``$ref`` would lose its target.
    (``oneOf`` as a plain union, as ``json_grammar`` reads it.)"""
    try:
        schema = json.loads(schema_text)
    except ValueError:
        return None
    if not isinstance(schema, dict) or "$defs" in schema or "definitions" in schema:
        return None
    keys = [key for key in schema if key not in ("title", "description", "$schema")]
    if len(keys) != 1 or keys[0] not in ("anyOf", "oneOf"):
        return None
    branches = schema[keys[0]]
    return branches if isinstance(branches, list) and len(branches) >= 2 else None


def _compact_grammar(schema_text: str) -> str | None:
    """A grammar for compact JSON, or None to let GenAI's json_schema (free whitespace) do it."""
    try:
        return compact_json_grammar(json.loads(schema_text))
    except ValueError as exc:  # UnsupportedSchema, or (never expected) text that is not JSON
        logger.info("JSON schema enforced with free whitespace (%s)", exc)
        return None


def _base_temperature(base: Any) -> float:
    """The model's default: its generation_config temperature when it samples, else greedy."""
    return float(base.temperature) if base.do_sample else 0.0
