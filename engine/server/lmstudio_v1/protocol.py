"""Request models and response builders of LM Studio's native REST API v1 (``/api/v1``).

Field names and shapes are LM Studio's documentation's (lmstudio.ai/docs/developer/rest):
``POST /api/v1/chat``, ``GET /api/v1/models``, ``POST /api/v1/models/load`` and
``/unload``. Requests accept unknown fields (logged, then ignored); every field Sidelight
uses is validated here, so a bad one is a 400 naming it. Input items are checked by kind in
:mod:`.translate`, so an image or an unknown item type is refused with a sentence naming
the item rather than pydantic's list of expected shapes.

Errors have the shape of LM Studio's ``error`` stream event,
``{"error": {"type", "message", "code", "param"}}`` (code and param when known).
Responses are plain dicts built by the small functions at the end.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine.server.fields import INT64_MAX, Float32, Int, Int64
from engine.server.model_info import ModelInfo

Reasoning = Literal["off", "low", "medium", "high", "on"]
# LM Studio's error types (its streaming-events page lists them).
ErrorType = Literal["invalid_request", "model_not_found", "not_implemented", "internal_error"]

_Count = Annotated[Int, Field(ge=1, le=INT64_MAX)]
_BITS = re.compile(r"\d+")


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")

    def unknown_fields(self) -> list[str]:
        return sorted((self.model_extra or {}).keys())


class InputItem(_Model):
    """One ``input`` item: ``{"type": "message" | "text", "content"}`` or an image.

    Kinds and their fields are checked in :mod:`.translate` (see the module docstring).
    """

    type: str
    content: Any = None
    data_url: Any = None


def _as_items(value: Any) -> Any:
    """A string ``input`` is one message item (so errors name items, never a union)."""
    return [{"type": "message", "content": value}] if isinstance(value, str) else value


class ChatRequest(_Model):
    """``POST /api/v1/chat``."""

    model: str = Field(min_length=1)
    input: Annotated[list[InputItem], Field(min_length=1)]
    system_prompt: str | None = None
    integrations: list[Any] | None = None
    stream: bool = False
    temperature: Float32 | None = Field(default=None, ge=0)
    top_p: Float32 | None = Field(default=None, ge=0, le=1)
    top_k: Int64 | None = None  # 0 or below: off
    min_p: Float32 | None = Field(default=None, ge=0, le=1)
    repeat_penalty: Float32 | None = Field(default=None, gt=0)
    max_output_tokens: _Count | None = None
    reasoning: Reasoning | None = None
    context_length: _Count | None = None
    store: bool = True
    previous_response_id: str | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _input_items(cls, value: Any) -> Any:
        return _as_items(value)

    @field_validator("integrations")
    @classmethod
    def _no_integrations(cls, value: list[Any] | None) -> list[Any] | None:
        if value:
            raise ValueError(
                "plugins and MCP servers are not supported by Sidelight; leave integrations out"
            )
        return value

    @field_validator("previous_response_id")
    @classmethod
    def _response_id(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("resp_"):
            raise ValueError("must start with 'resp_'")
        return value


class LoadRequest(_Model):
    """``POST /api/v1/models/load``. The llama.cpp-only settings (batch size, flash
    attention, experts, KV cache offload) are accepted and, as LM Studio documents for its
    other engines, have no effect."""

    model: str = Field(min_length=1)
    context_length: _Count | None = None
    eval_batch_size: _Count | None = None
    flash_attention: bool | None = None
    num_experts: _Count | None = None
    offload_kv_cache_to_gpu: bool | None = None
    echo_load_config: bool = False


class UnloadRequest(_Model):
    """``POST /api/v1/models/unload``."""

    instance_id: str = Field(min_length=1)


# ---- errors ----------------------------------------------------------------------------


def error_type(status: int, code: str | None) -> ErrorType:
    if status == 501:
        return "not_implemented"
    if code == "model_not_found":
        return "model_not_found"
    return "invalid_request" if status < 500 else "internal_error"


def error_object(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """The ``error`` object of a body or a stream's ``error`` event."""
    error: dict[str, Any] = {"type": error_type(status, code), "message": message}
    if code is not None:
        error["code"] = code
    if param is not None:
        error["param"] = param
    return error


def error_body(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": error_object(status, message, param=param, code=code)}


# ---- chat ------------------------------------------------------------------------------


def event(data: dict[str, Any]) -> str:
    """One SSE event, named by its ``type`` as LM Studio names them."""
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"event: {data['type']}\ndata: {payload}\n\n"


def stats(
    input_tokens: int,
    output_tokens: int,
    reasoning_tokens: int,
    tokens_per_second: float | None,
    ttft_seconds: float | None,
    load_seconds: float | None,
) -> dict[str, Any]:
    """``stats``; ``model_load_time_seconds`` only when this request loaded the model."""
    result: dict[str, Any] = {
        "input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "reasoning_output_tokens": reasoning_tokens,
        "tokens_per_second": tokens_per_second or 0.0,
        "time_to_first_token_seconds": round(ttft_seconds or 0.0, 3),
    }
    if load_seconds is not None:
        result["model_load_time_seconds"] = round(load_seconds, 3)
    return result


def chat_result(
    model: str, output: list[dict[str, Any]], stats_: dict[str, Any], response_id: str | None
) -> dict[str, Any]:
    """The whole answer (also the ``result`` of ``chat.end``)."""
    result: dict[str, Any] = {"model_instance_id": model, "output": output, "stats": stats_}
    if response_id is not None:
        result["response_id"] = response_id
    return result


# ---- models ----------------------------------------------------------------------------


def model_entry(info: ModelInfo, loaded_context: int | None) -> dict[str, Any]:
    """One model of ``GET /api/v1/models``; ``loaded_context`` is the loaded instance's
    context length (``None``: not loaded). OpenVINO IR is none of LM Studio's formats
    (``gguf``, ``mlx``), so its ``format`` is ``null``."""
    embedding = info.task == "embeddings"
    entry: dict[str, Any] = {
        "type": "embedding" if embedding else "llm",
        "publisher": info.publisher,
        "key": info.id,
        "display_name": info.id,
    }
    if not embedding:
        entry["architecture"] = info.architecture
    instances = []
    if loaded_context is not None:
        instances.append({"id": info.id, "config": {"context_length": loaded_context}})
    entry |= {
        "quantization": quantization(info.weights),
        "size_bytes": info.size_bytes,
        "params_string": info.parameter_size if info.parameter_count else None,
        "loaded_instances": instances,
        "max_context_length": info.context_length or 0,
        "format": "gguf" if info.format == "gguf" else None,
    }
    if not embedding:
        entry["capabilities"] = capabilities(info)
        entry["description"] = None
    if info.remote is not None:  # served by another server (MODEL@NAME)
        entry["remote"] = info.remote
    return entry


def quantization(weights: str | None) -> dict[str, Any] | None:
    """``{"name", "bits_per_weight"}`` from the weights' name (``int4``, ``Q4_K_M``, ``fp16``)."""
    if not weights:
        return None
    bits = _BITS.search(weights)
    return {"name": weights.upper(), "bits_per_weight": int(bits.group()) if bits else None}


def capabilities(info: ModelInfo) -> dict[str, Any]:
    """Whether it sees (a vision-language model); a reasoning model's thinking can be
    switched on and off."""
    result: dict[str, Any] = {"vision": info.task == "vision", "trained_for_tool_use": info.tools}
    if info.reasoning:
        result["reasoning"] = {"allowed_options": ["off", "on"], "default": "on"}
    return result
