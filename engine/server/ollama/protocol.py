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
from engine.server.keep_alive import parse_keep_alive
from engine.server.model_info import ModelInfo

# Recent Ollama clients check the server version; this is one they all accept.
OLLAMA_VERSION = "0.12.0"

DoneReason = Literal["stop", "length"]
"""A generation's ``done_reason``: ``length`` when its token limit ended it, else ``stop``."""


class _Request(BaseModel):
    model_config = ConfigDict(extra="allow")

    def unknown_fields(self) -> list[str]:
        return sorted((self.model_extra or {}).keys())


def _valid_keep_alive(value: object) -> object:
    """A ``keep_alive`` that is no duration is a 400 naming it, never silently ignored."""
    if value is None:
        return value
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError('must be a number of seconds or a duration string such as "5m"')
    parse_keep_alive(value)
    return value


# Ollama options with no OpenVINO equivalent: checked like Ollama's decoder checks them (the
# type, and a Go int64 or float32 holding the value), then ignored.
_RUNNER_OPTIONS = frozenset(
    {
        "num_keep",
        "num_batch",
        "num_gpu",
        "main_gpu",
        "num_thread",
        "repeat_last_n",
        "mirostat",
        "typical_p",
        "tfs_z",
        "mirostat_tau",
        "mirostat_eta",
        "numa",
        "low_vram",
        "vocab_only",
        "use_mmap",
        "use_mlock",
        "penalize_newline",
    }
)


class Options(BaseModel):
    """Ollama's ``options``: every field Ollama knows is type-checked and bounded.

    Sampling values out of their range are clamped where Ollama's sampler clamps them
    (see :func:`engine.server.ollama.serving.sampling`); numbers no Go ``int``/``float32``
    holds are a 400, as Ollama's JSON decoder refuses them. Runner settings (``num_gpu``,
    ``num_thread``, ...) are checked and ignored; unknown names are ignored, as Ollama does.
    """

    model_config = ConfigDict(extra="allow")

    num_ctx: Int64 | None = None
    num_predict: Int64 | None = None  # -1, -2 (and any value <= 0): until the context is full
    temperature: Float32 | None = None
    top_p: Float32 | None = None
    top_k: Int64 | None = None
    min_p: Float32 | None = None
    seed: Seed | None = None  # negative: a random seed
    stop: list[str] | None = Field(default=None, max_length=MAX_STOP_SEQUENCES)
    repeat_penalty: Float32 | None = Field(default=None, gt=0)
    presence_penalty: Float32 | None = None
    frequency_penalty: Float32 | None = None
    # Runner settings and samplers GenAI does not have (_RUNNER_OPTIONS).
    num_keep: Int64 | None = None
    num_batch: Int64 | None = None
    num_gpu: Int64 | None = None
    main_gpu: Int64 | None = None
    num_thread: Int64 | None = None
    repeat_last_n: Int64 | None = None
    mirostat: Int64 | None = None
    typical_p: Float32 | None = None
    tfs_z: Float32 | None = None
    mirostat_tau: Float32 | None = None
    mirostat_eta: Float32 | None = None
    numa: bool | None = None
    low_vram: bool | None = None
    vocab_only: bool | None = None
    use_mmap: bool | None = None
    use_mlock: bool | None = None
    penalize_newline: bool | None = None

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    def ignored(self) -> list[str]:
        """Options given that Sidelight does not use (``num_ctx`` aside: see log_ignored)."""
        runner = {name for name in _RUNNER_OPTIONS if getattr(self, name) is not None}
        return sorted(runner | set(self.model_extra or {}))


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

    @field_validator("keep_alive", mode="before")
    @classmethod
    def _check_keep_alive(cls, value: object) -> object:
        return _valid_keep_alive(value)

    @field_validator("format")
    @classmethod
    def _check_format(cls, value: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
        if isinstance(value, str) and value not in ("", "json"):
            raise ValueError('format must be "json" or a JSON schema object')
        if isinstance(value, dict):
            check_schema_size(value)
            check_schema(value)
        return value or None


class ChatRequest(_GenerateFields):
    messages: list[Message] = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = Field(default=None, max_length=MAX_TOOLS)

    @field_validator("tools")
    @classmethod
    def _check_tools(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for tool in value or []:
            check_schema_size(tool)
            function = tool.get("function")
            if isinstance(function, dict) and isinstance(function.get("parameters"), dict):
                check_schema(function["parameters"], f"{function.get('name')}.parameters")
        return value


class GenerateRequest(_GenerateFields):
    prompt: str | None = None
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    context: list[Int] | None = None
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
    """``/api/embed``, bounded like ``/v1/embeddings``: 1 to 2048 texts."""

    model: str = Field(min_length=1)
    input: str | list[str]
    truncate: bool = True
    options: Options | None = None
    keep_alive: float | str | None = None
    dimensions: Int64 | None = Field(default=None, ge=1)

    @field_validator("keep_alive", mode="before")
    @classmethod
    def _check_keep_alive(cls, value: object) -> object:
        return _valid_keep_alive(value)

    @field_validator("input")
    @classmethod
    def _check_input(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list):
            if not value:
                raise ValueError("must not be empty")
            if len(value) > MAX_EMBEDDING_INPUTS:
                raise ValueError(f"at most {MAX_EMBEDDING_INPUTS} inputs are allowed per request")
        return value

    def inputs(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


class EmbeddingsRequest(_Request):
    """The legacy ``/api/embeddings``: one ``prompt``, one ``embedding``."""

    model: str = Field(min_length=1)
    prompt: str = ""
    options: Options | None = None
    keep_alive: float | str | None = None

    @field_validator("keep_alive", mode="before")
    @classmethod
    def _check_keep_alive(cls, value: object) -> object:
        return _valid_keep_alive(value)


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
        "format": info.format if info.format in ("gguf", "remote") else "openvino",
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
    entry = {
        "name": name,
        "model": name,
        "modified_at": timestamp(info.modified_at),
        "size": info.size_bytes,
        "digest": info.digest,
        "details": details(info),
    }
    if info.remote is not None:  # served by another server (MODEL@NAME)
        entry["remote"] = info.remote
    return entry


# Ollama's expires_at for a model kept loaded forever (a negative keep_alive).
NEVER_EXPIRES = "2318-01-01T00:00:00Z"


def ps_entry(
    info: ModelInfo, context_length: int | None, on_gpu: bool, expires: datetime | None
) -> dict[str, Any]:
    """One /api/ps entry; ``expires`` is when the idle model unloads (None: never)."""
    name = tag_name(info.id)
    return {
        "name": name,
        "model": name,
        "size": info.size_bytes,
        "digest": info.digest,
        "details": details(info),
        "expires_at": NEVER_EXPIRES if expires is None else timestamp(expires),
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
    done_reason: DoneReason,
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
