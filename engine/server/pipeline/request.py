"""The canonical generation request every dialect translates into."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from engine.server.images import ImageRef
from engine.worker.messages import SamplingParams

# Who asked: for logs and metrics, and for the few rules that differ by dialect.
Dialect = Literal["openai", "ollama", "lmstudio", "anthropic", "responses", "desktop"]
ToolMode = Literal["auto", "required", "none"]


@dataclass(frozen=True)
class ToolChoice:
    """Whether the model may, must or must not call a tool; ``name`` forces one function."""

    mode: ToolMode = "auto"
    name: str | None = None


@dataclass(frozen=True)
class GenerateRequest:
    """One generation, whatever dialect it came in.

    Exactly one of ``messages`` (chat: the template is applied) and ``prompt`` (raw
    continuation; with ``suffix``, fill-in-the-middle) is set. Every field has been
    validated by the dialect's protocol module before this object exists.

    Messages use the OpenAI chat shape the chat templates expect: ``role`` (``system``,
    ``user``, ``assistant``, ``tool``), ``content`` (text), and on assistant turns
    ``tool_calls`` (``[{"id", "type": "function", "function": {"name", "arguments"}}]``,
    arguments as a JSON string or an object: the pipeline hands the templates objects) and
    optionally ``reasoning_content``; tool results carry
    ``tool_call_id``. A message with images names them by index into ``images`` in
    ``message["images"]`` (a list of ints; the pipeline decodes them for a model that sees,
    the worker puts them before the message's text). Tools use the OpenAI function-tool shape
    (``{"type": "function", "function": {"name", "description", "parameters"}}``).
    """

    model: str
    dialect: Dialect
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    suffix: str | None = None
    # An upper bound in every dialect (max_tokens, max_output_tokens, num_predict): the worker
    # clips it to the room the prompt leaves in the context (finish reason length).
    max_tokens: int | None = None
    context_limit: int | None = None  # a smaller context for this request (Ollama's num_ctx)
    stop: tuple[str, ...] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)
    tools: list[dict[str, Any]] = field(default_factory=list)
    # How many of ``tools`` (the first ones) the chat template lists; the others were
    # described in the conversation where they were offered (Anthropic's deferred tools),
    # so that offering one leaves the prompt's head, and its prefix cache, as it was.
    # None: the template lists them all. Every tool in ``tools`` can be called.
    listed_tools: int | None = None
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    parallel_tool_calls: bool = True
    # Structured output: the reply must match this JSON schema (json_object: {"type":
    # "object"}); ``schema_param`` names the request field in errors.
    response_schema: dict[str, Any] | None = None
    schema_param: str = "response_format"
    # Reasoning models: True/False switches thinking in the chat template; None keeps the
    # model's default.
    thinking: bool | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    logprobs: bool = False
    # Seconds the model stays loaded once idle after this request (Ollama's keep_alive,
    # LM Studio's ttl; math.inf: forever; None: unchanged).
    keep_alive: float | None = None
    # Whether a leading <think> block becomes ReasoningText. False: the text passes through
    # as written unless tool calls are parsed (raw completions); None: when the model's chat
    # template knows thinking blocks.
    split_reasoning: bool | None = None
    # Only template and count the prompt (Anthropic's count_tokens): the engine answers
    # Started and then Done without generating, and the prompt need not fit the context.
    count_only: bool = False
    # The dialect's names for the fields the engine names in its refusals (``messages``,
    # ``max_tokens``): Responses says ``input`` and ``max_output_tokens``.
    field_names: dict[str, str] = field(default_factory=dict)
    # Every image of the request, in order, as sent (decoded by the pipeline for a
    # vision-language model; any other model refuses them with a 400).
    images: tuple[ImageRef, ...] = ()
