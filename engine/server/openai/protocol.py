"""Request and response models of the OpenAI-compatible API (``/v1``).

Requests are pydantic models that accept unknown fields (IDE plugins send many) and let the
serving code log them. Responses are built as plain dicts by small functions here, so the
streaming path stays cheap and every chunk has exactly OpenAI's shape.

Tools, ``tool_choice``, ``response_format`` and reasoning fields are validated here (a bad
one is a 400 naming it); the serving code turns them into templating, constrained decoding
and reply parsing.
"""

from __future__ import annotations

import base64
import struct
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from engine.echo import clip
from engine.server.errors import APIError
from engine.server.fields import (
    MAX_EMBEDDING_INPUTS,
    MAX_STOP_SEQUENCES,
    MAX_TOOLS,
    Float32,
    Int,
    Int64,
    Seed,
    check_schema,
    check_schema_size,
)
from engine.server.images import ImageList, ImageRef, image_from_url
from engine.server.pipeline import Done, FinishReason
from engine.server.sampling import sampling_params
from engine.worker.messages import SamplingParams


class _Request(BaseModel):
    model_config = ConfigDict(extra="allow")

    def unknown_fields(self) -> list[str]:
        return sorted((self.model_extra or {}).keys())


class TextContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text"]
    text: str


class ImageURL(BaseModel):
    model_config = ConfigDict(extra="allow")
    url: str
    detail: Literal["auto", "low", "high"] | None = None  # accepted; the model's own size rule


class ImageContentPart(BaseModel):
    """An ``image_url`` part: a data URL (remote URLs are refused, engine.server.images)."""

    model_config = ConfigDict(extra="allow")
    type: Literal["image_url"]
    image_url: ImageURL | str


class ToolCallFunction(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    arguments: str | dict[str, Any] = "{}"


class AssistantToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str | None = None
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextContentPart | ImageContentPart] | None = None
    name: str | None = None
    tool_calls: list[AssistantToolCall] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content if isinstance(part, TextContentPart))

    def image_refs(self, where: str) -> list[ImageRef]:
        """This message's ``image_url`` parts, each named by its field (``where``: the
        message's own path, e.g. ``messages.0``)."""
        if not isinstance(self.content, list):
            return []
        refs = []
        for j, part in enumerate(self.content):
            if isinstance(part, ImageContentPart):
                url = part.image_url if isinstance(part.image_url, str) else part.image_url.url
                refs.append(image_from_url(url, f"{where}.content.{j}.image_url"))
        return refs


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class _SamplingFields(_Request):
    """Sampling fields, bounded as OpenAI bounds them and to what the engine's types hold."""

    model: str
    max_tokens: Int64 | None = Field(default=None, ge=1)
    temperature: Float32 | None = Field(default=None, ge=0, le=2)
    top_p: Float32 | None = Field(default=None, ge=0, le=1)  # 0: only the likeliest token
    stop: str | list[str] | None = None
    seed: Seed | None = None  # negative: a random seed
    presence_penalty: Float32 | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: Float32 | None = Field(default=None, ge=-2, le=2)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: Int = 1
    user: str | None = None
    # Extensions beyond OpenAI (vLLM and llama.cpp spell them the same way).
    top_k: Int64 | None = Field(default=None, ge=-1)  # -1 and 0: off
    # LM Studio's: seconds the model stays loaded once idle after this request.
    ttl: Int64 | None = Field(default=None, ge=1)
    min_p: Float32 | None = Field(default=None, ge=0, le=1)
    repetition_penalty: Float32 | None = Field(default=None, gt=0)
    ignore_eos: bool = False

    @field_validator("stop")
    @classmethod
    def _check_stop(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > MAX_STOP_SEQUENCES:
            raise ValueError(f"at most {MAX_STOP_SEQUENCES} stop sequences are allowed")
        return value

    @field_validator("n")
    @classmethod
    def _check_n(cls, value: int) -> int:
        if value != 1:
            raise ValueError("only n=1 is supported: Sidelight returns one choice per request")
        return value

    def sampling(self) -> SamplingParams:
        return sampling_params(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            min_p=self.min_p,
            seed=self.seed,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            repetition_penalty=self.repetition_penalty,
            ignore_eos=self.ignore_eos,
        )

    def stop_tuple(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class FunctionDefinition(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDefinition(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"]
    function: NamedFunction


class JSONSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    name: str = "response"
    description: str | None = None
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None

    @model_validator(mode="after")
    def _needs_schema(self) -> ResponseFormat:
        if self.type == "json_schema" and (
            self.json_schema is None or self.json_schema.json_schema is None
        ):
            raise ValueError("json_schema.schema is required when type is 'json_schema'")
        if self.json_schema is not None and self.json_schema.json_schema is not None:
            check_schema_size(self.json_schema.json_schema)
            check_schema(self.json_schema.json_schema)
        return self


class ChatCompletionRequest(_SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: Int64 | None = Field(default=None, ge=1)
    tools: list[ToolDefinition] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    logprobs: bool = False
    top_logprobs: Int | None = Field(default=None, ge=0, le=20)

    @model_validator(mode="after")
    def _token_limit(self) -> ChatCompletionRequest:
        if self.max_completion_tokens is not None:
            self.max_tokens = self.max_completion_tokens
        return self

    @model_validator(mode="after")
    def _tool_choice(self) -> ChatCompletionRequest:
        names = [t.function.name for t in self.tools or []]
        if self.tool_choice in ("required",) and not names:
            raise ValueError("tool_choice: 'required' needs at least one tool in tools")
        choice = self.tool_choice
        if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
            raise ValueError(f"tool_choice: no tool named '{clip(choice.function.name)}' in tools")
        for tool in self.tools or []:
            if tool.function.parameters is not None:
                try:
                    check_schema_size(tool.function.parameters)
                    check_schema(tool.function.parameters, f"{tool.function.name}.parameters")
                except ValueError as exc:
                    raise ValueError(f"tools: {exc}") from exc
        return self

    @property
    def calls_tools(self) -> bool:
        """Whether tools are offered and the model may (or must) call them."""
        return bool(self.tools) and self.tool_choice != "none"

    def tool_dicts(self) -> list[dict[str, Any]]:
        return [t.model_dump(exclude_none=True) for t in self.tools or []]

    def template_kwargs(self) -> dict[str, Any]:
        """``chat_template_kwargs`` plus ``reasoning_effort`` for templates that read it."""
        kwargs = dict(self.chat_template_kwargs or {})
        if self.reasoning_effort is not None:
            kwargs.setdefault("reasoning_effort", self.reasoning_effort)
        return kwargs

    @property
    def thinking(self) -> bool | None:
        """``reasoning_effort: "none"`` switches thinking off; otherwise the model decides."""
        return False if self.reasoning_effort == "none" else None

    @property
    def response_schema(self) -> dict[str, Any] | None:
        """The JSON schema ``response_format`` asks for (``None``: free text)."""
        response_format = self.response_format
        if response_format is None or response_format.type == "text":
            return None
        if response_format.type == "json_object":
            return {"type": "object"}
        assert response_format.json_schema is not None  # checked by ResponseFormat
        return response_format.json_schema.json_schema

    def template_messages(self, images: ImageList | None = None) -> list[dict[str, Any]]:
        """Messages in the chat-template shape: text content, tool calls as sent; each
        message's images go to ``images`` (refused when it is None) and the message names
        their indices."""
        out = []
        for i, message in enumerate(self.messages):
            role = "system" if message.role == "developer" else message.role
            item: dict[str, Any] = {"role": role, "content": message.text()}
            refs = message.image_refs(f"messages.{i}")
            if refs and images is None:
                raise APIError(400, "images are not taken here", param=refs[0].field)
            if refs and images is not None:
                item["images"] = [images.add(ref) for ref in refs]
            if message.name:
                item["name"] = message.name
            if message.tool_calls:
                item["tool_calls"] = [_template_call(c) for c in message.tool_calls]
            if message.tool_call_id:
                item["tool_call_id"] = message.tool_call_id
            out.append(item)
        return out


def _template_call(call: AssistantToolCall) -> dict[str, Any]:
    # Arguments stay as sent; the pipeline turns JSON text into objects for every dialect.
    item: dict[str, Any] = {
        "type": "function",
        "function": {"name": call.function.name, "arguments": call.function.arguments},
    }
    if call.id:
        item["id"] = call.id
    return item


class CompletionRequest(_SamplingFields):
    prompt: str | list[str]
    echo: bool = False
    suffix: str | None = None
    logprobs: Int | None = Field(default=None, ge=0, le=5)

    @field_validator("prompt")
    @classmethod
    def _single_prompt(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and len(value) != 1:
            raise ValueError("exactly one prompt string is supported per request")
        return value

    def prompt_text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]


# ---- responses -------------------------------------------------------------------------


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    """OpenAI's usage; ``prompt_tokens_details.cached_tokens``: of the prompt, found in the
    prefix cache (engine.worker.prefix_ledger)."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


class EmbeddingRequest(_Request):
    model: str
    input: str | list[str] | list[Int] | list[list[Int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Int64 | None = Field(default=None, ge=1)
    user: str | None = None

    @field_validator("input")
    @classmethod
    def _texts_only(
        cls, value: str | list[str] | list[int] | list[list[int]]
    ) -> str | list[str] | list[int] | list[list[int]]:
        if isinstance(value, list):
            if not value:
                raise ValueError("must not be empty")
            if len(value) > MAX_EMBEDDING_INPUTS:
                raise ValueError(f"at most {MAX_EMBEDDING_INPUTS} inputs are allowed per request")
            if not all(isinstance(v, str) for v in value):
                raise ValueError("token-id input is not supported; send text")
        return value

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else [str(v) for v in self.input]


def chat_message(
    content: str | None,
    tool_calls: list[dict[str, Any]] | None = None,
    reasoning: str | None = None,
) -> dict[str, Any]:
    """The assistant message of a whole answer (``content`` is null when only tools answer)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def chat_completion(
    rid: str,
    created: int,
    model: str,
    message: dict[str, Any],
    finish_reason: FinishReason,
    usage_: dict[str, int],
    logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": logprobs,
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage_,
        "system_fingerprint": None,
    }


def chat_chunk(
    rid: str,
    created: int,
    model: str,
    delta: dict[str, Any] | None,
    finish_reason: FinishReason | None = None,
    usage_: dict[str, int] | None = None,
    with_usage_field: bool = False,
) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``delta=None`` makes the usage-only final chunk."""
    chunk: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }
    if with_usage_field:
        chunk["usage"] = usage_
    return chunk


def text_completion(
    rid: str,
    created: int,
    model: str,
    text: str | None,
    finish_reason: FinishReason | None,
    usage_: dict[str, int] | None,
    *,
    chunk: bool = False,
    logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": []
        if text is None
        else [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}],
    }
    if usage_ is not None or not chunk:
        body["usage"] = usage_
    return body


def timings(done: Done) -> dict[str, Any]:
    """llama.cpp-style timings: what chat UIs show as TTFT and tokens/s."""
    ttft, tps = done.timings.ttft_seconds, done.tokens_per_second
    body: dict[str, Any] = {
        # llama.cpp's meanings: prompt tokens computed, and those reused from the cache.
        "prompt_n": done.usage.prompt_tokens - done.usage.cached_tokens,
        "cache_n": done.usage.cached_tokens,
        "predicted_n": done.usage.completion_tokens,
        "ttft_ms": round(ttft * 1000, 1) if ttft else None,
        "predicted_per_second": round(tps, 2) if tps else None,
    }
    if done.timings.speculation != "off":  # llama.cpp's name for accepted draft tokens
        body["draft_n_accepted"] = done.timings.accepted_tokens
        body["decode_steps"] = done.timings.decode_steps
        body["speculation"] = done.timings.speculation
    return body


def model_card(model_id: str, created: int, **extra: Any) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": created, "owned_by": "sidelight", **extra}


def completion_logprobs(tokens: list[tuple[str, float]], offset: int) -> dict[str, Any]:
    """Legacy completions ``logprobs``: GenAI reports only the chosen token's probability."""
    offsets, position = [], offset
    for token, _ in tokens:
        offsets.append(position)
        position += len(token)
    return {
        "tokens": [t for t, _ in tokens],
        "token_logprobs": [lp for _, lp in tokens],
        "top_logprobs": [{t: lp} for t, lp in tokens],
        "text_offset": offsets,
    }


def chat_logprobs(tokens: list[tuple[str, float]]) -> dict[str, Any]:
    """Chat ``logprobs.content`` entries (``top_logprobs`` holds the chosen token only)."""
    content = []
    for token, logprob in tokens:
        raw = list(token.encode("utf-8"))
        content.append(
            {
                "token": token,
                "logprob": logprob,
                "bytes": raw,
                "top_logprobs": [{"token": token, "logprob": logprob, "bytes": raw}],
            }
        )
    return {"content": content, "refusal": None}


def embedding_list(
    model: str, vectors: list[list[float]], encoding: str, prompt_tokens: int
) -> dict[str, Any]:
    def encode(vector: list[float]) -> list[float] | str:
        if encoding == "base64":
            return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
        return vector

    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": encode(v)}
            for i, v in enumerate(vectors)
        ],
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }
