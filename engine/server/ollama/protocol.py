"""Request and response models of the Ollama-compatible API (``/api``).

Field names follow Ollama's wire format exactly, as its own clients (the ``ollama`` Python
and JavaScript libraries, Copilot, Zed, Continue, Open WebUI) send and read them. Requests
accept unknown fields, which the serving code logs. Responses are plain dicts built by the
small functions here, so each NDJSON line is cheap and has exactly Ollama's shape.

Durations are nanoseconds and times are RFC 3339, as Ollama writes them.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine.server.model_info import ModelInfo

# Recent Ollama clients check the server version; this is one they all accept.
OLLAMA_VERSION = "0.12.0"


class _Request(BaseModel):
    model_config = ConfigDict(extra="allow")

    def unknown_fields(self) -> list[str]:
        return sorted((self.model_extra or {}).keys())


class Options(BaseModel):
    """Ollama's ``options``. Runner settings (``num_gpu``, ``num_thread``, ...) are ignored."""

    model_config = ConfigDict(extra="allow")

    num_ctx: int | None = None
    num_predict: int | None = None
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    min_p: float | None = Field(default=None, ge=0, le=1)
    seed: int | None = None
    stop: list[str] | None = None
    repeat_penalty: float | None = Field(default=None, gt=0)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    def ignored(self) -> list[str]:
        return sorted((self.model_extra or {}).keys())


class ToolCallFunction(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    function: ToolCallFunction


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = ""
    thinking: str | None = None
    images: list[str] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_name: str | None = None


class _GenerateFields(_Request):
    model: str = Field(min_length=1)
    stream: bool = True  # Ollama streams unless told not to
    options: Options | None = None
    format: str | dict[str, Any] | None = None
    keep_alive: float | str | None = None
    think: bool | Literal["low", "medium", "high"] | None = None

    @field_validator("format")
    @classmethod
    def _check_format(cls, value: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
        if isinstance(value, str) and value not in ("", "json"):
            raise ValueError('format must be "json" or a JSON schema object')
        return value or None


class ChatRequest(_GenerateFields):
    messages: list[Message] = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None


class GenerateRequest(_GenerateFields):
    prompt: str | None = None
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    context: list[int] | None = None
    raw: bool = False
    images: list[str] | None = None


class ModelRequest(_Request):
    """``/api/show``: the model by ``model`` (or the older ``name``)."""

    model: str | None = None
    name: str | None = None
    verbose: bool = False

    def target(self) -> str:
        return self.model or self.name or ""


class EmbedRequest(_Request):
    model: str = Field(min_length=1)
    input: str | list[str]
    truncate: bool = True
    options: Options | None = None
    keep_alive: float | str | None = None
    dimensions: int | None = Field(default=None, ge=1)

    def inputs(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


class EmbeddingsRequest(_Request):
    """The legacy ``/api/embeddings``: one ``prompt``, one ``embedding``."""

    model: str = Field(min_length=1)
    prompt: str = ""
    options: Options | None = None
    keep_alive: float | str | None = None


# ---- responses -------------------------------------------------------------------------


def timestamp(moment: datetime | None = None) -> str:
    """RFC 3339 with nanosecond-style precision, as Ollama writes ``created_at``."""
    moment = moment or datetime.now(timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def nanoseconds(seconds: float | None) -> int:
    return int((seconds or 0.0) * 1e9)


def details(info: ModelInfo) -> dict[str, Any]:
    family = info.architecture or "unknown"
    return {
        "parent_model": "",
        "format": "gguf" if info.format == "gguf" else "openvino",
        "family": family,
        "families": [family],
        "parameter_size": info.parameter_size,
        "quantization_level": info.quantization,
    }


def tag_name(model_id: str) -> str:
    """Ollama names carry a tag; every Sidelight model is ``:latest``."""
    return f"{model_id}:latest"


def tags_entry(info: ModelInfo) -> dict[str, Any]:
    name = tag_name(info.id)
    return {
        "name": name,
        "model": name,
        "modified_at": timestamp(info.modified_at),
        "size": info.size_bytes,
        "digest": info.digest,
        "details": details(info),
    }


def ps_entry(info: ModelInfo, context_length: int | None, on_gpu: bool) -> dict[str, Any]:
    name = tag_name(info.id)
    return {
        "name": name,
        "model": name,
        "size": info.size_bytes,
        "digest": info.digest,
        "details": details(info),
        # Sidelight keeps a model loaded until another is picked: no expiry.
        "expires_at": "2318-01-01T00:00:00Z",
        "size_vram": info.size_bytes if on_gpu else 0,
        "context_length": context_length or info.context_length or 0,
    }


def chat_line(model: str, message: dict[str, Any]) -> dict[str, Any]:
    return {"model": model, "created_at": timestamp(), "message": message, "done": False}


def generate_line(model: str, text: str, thinking: str | None = None) -> dict[str, Any]:
    line: dict[str, Any] = {
        "model": model,
        "created_at": timestamp(),
        "response": text,
        "done": False,
    }
    if thinking:
        line["thinking"] = thinking
    return line


def final_fields(
    done_reason: str,
    *,
    total_seconds: float,
    load_seconds: float,
    prompt_tokens: int,
    prompt_seconds: float | None,
    completion_tokens: int,
    decode_seconds: float | None,
) -> dict[str, Any]:
    """The statistics Ollama puts on the last line (``done: true``)."""
    return {
        "done": True,
        "done_reason": done_reason,
        "total_duration": nanoseconds(total_seconds),
        "load_duration": nanoseconds(load_seconds),
        "prompt_eval_count": prompt_tokens,
        "prompt_eval_duration": nanoseconds(prompt_seconds),
        "eval_count": completion_tokens,
        "eval_duration": nanoseconds(decode_seconds),
    }
