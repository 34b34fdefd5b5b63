"""Request models and response objects of OpenAI's Responses API (``/v1/responses``).

Requests are pydantic models that accept unknown fields (Codex sends ``client_metadata``,
``prompt_cache_key`` and more) and are validated before anything else happens: a bad field
is a 400 in OpenAI's error shape whose ``param`` names it (``input.2.call_id``). Item and
tool types are checked first, so an unsupported one gets a sentence saying so rather than
pydantic's list of expected tags.

The response side (plain dicts) is in :mod:`engine.server.responses.objects`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from engine.echo import clip, utf8_size
from engine.server.errors import APIError
from engine.server.fields import MAX_TOOLS, Float32, Int, Int64, check_schema, check_schema_size

# Tools OpenAI runs on its own servers; Sidelight cannot run them. Web search is left out of
# what the model is offered (Codex offers it on every request, and an answer without a search
# is still an answer; the log says so). Every other one is a 400 naming ``tools.N.type``, as
# Anthropic's server tools are: an answer without the files, the MCP server or the code run
# the client asked for would silently be another answer.
HostedToolType = Literal[
    "web_search",
    "web_search_preview",
    "web_search_preview_2025_03_11",
    "web_search_2025_08_26",
    "file_search",
    "code_interpreter",
    "image_generation",
    "computer_use_preview",
    "mcp",
]
HOSTED_TOOL_TYPES = frozenset(get_args(HostedToolType))
OMITTED_TOOL_TYPES = frozenset(kind for kind in HOSTED_TOOL_TYPES if kind.startswith("web_search"))
TOOL_TYPES = frozenset({"function", "namespace"}) | HOSTED_TOOL_TYPES
ITEM_TYPES = frozenset({"message", "function_call", "function_call_output", "reasoning"})
LOGPROBS_INCLUDE = "message.output_text.logprobs"
MAX_METADATA_KEYS = 16
# Fields a stored response keeps that no context bounds (the prompt's are bounded by it).
MAX_USER_BYTES = 256  # OpenAI's "stable identifier for your end-user"
MAX_NAME_CHARS = 256  # a function call's name and namespace (tool names are at most 64)

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
SummaryMode = Literal["auto", "concise", "detailed"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


# ---- input items -------------------------------------------------------------------------


class TextPart(_Model):
    type: Literal["input_text", "output_text"]
    text: str


class RefusalPart(_Model):
    type: Literal["refusal"]
    refusal: str


class ImagePart(_Model):
    """An ``input_image``: a data URL in ``image_url`` (remote URLs and ``file_id`` are
    refused: nothing is fetched, and there is no file store); ``detail`` is accepted."""

    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["auto", "low", "high"] | None = None

    @model_validator(mode="after")
    def _inline(self) -> ImagePart:
        if self.image_url is None:
            raise ValueError(
                "input_image needs image_url (a data URL); file_id is not supported: "
                "Sidelight keeps no files"
            )
        return self


class MediaPart(_Model):
    """Files and audio: refused (Sidelight serves no model that reads them)."""

    type: Literal["input_file", "input_audio"]

    @model_validator(mode="after")
    def _refuse(self) -> MediaPart:
        raise ValueError(
            f"{self.type} content is not supported: Sidelight's models read text and images"
        )


ContentPart = Annotated[TextPart | RefusalPart | ImagePart | MediaPart, Field(discriminator="type")]


def _as_parts(value: Any) -> Any:
    """A string where parts may stand is one text part."""
    return [{"type": "input_text", "text": value}] if isinstance(value, str) else value


def _text(parts: list[TextPart | RefusalPart | ImagePart | MediaPart]) -> str:
    return "".join(p.text if isinstance(p, TextPart) else getattr(p, "refusal", "") for p in parts)


class MessageItem(_Model):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: list[ContentPart]

    _parts = field_validator("content", mode="before")(_as_parts)

    def text(self) -> str:
        return _text(self.content)


class FunctionCallItem(_Model):
    type: Literal["function_call"]
    call_id: str = Field(min_length=1, max_length=256)
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    arguments: str
    namespace: str | None = Field(default=None, max_length=MAX_NAME_CHARS)


class FunctionCallOutputItem(_Model):
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1, max_length=256)
    output: list[ContentPart]

    _parts = field_validator("output", mode="before")(_as_parts)

    def text(self) -> str:
        return _text(self.output)


class SummaryPart(_Model):
    type: Literal["summary_text"]
    text: str


class ReasoningPart(_Model):
    type: Literal["reasoning_text"]
    text: str


class ReasoningItem(_Model):
    """A reasoning item sent back: its text goes with the assistant turn that follows."""

    type: Literal["reasoning"]
    summary: list[SummaryPart] = Field(default_factory=list)
    content: list[ReasoningPart] | None = None
    encrypted_content: str | None = None

    def text(self) -> str:
        if self.content:
            return "".join(p.text for p in self.content)
        return "\n\n".join(p.text for p in self.summary)


def _item_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        kind = value.get("type", "message" if "role" in value else None)
        return kind if isinstance(kind, str) else None
    return getattr(value, "type", None)


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")],
    Discriminator(
        _item_kind,
        custom_error_type="invalid_item",
        custom_error_message="each input item must be an object with a 'type'",
    ),
]


# ---- tools and formats -------------------------------------------------------------------


class FunctionTool(_Model):
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @field_validator("parameters")
    @classmethod
    def _schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            check_schema_size(value)
            check_schema(value, "parameters")
        return value


class NamespaceTool(_Model):
    """A group of function tools (Codex's sub-agent tools); calls name their namespace."""

    type: Literal["namespace"]
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    tools: list[FunctionTool] = Field(max_length=MAX_TOOLS)


class HostedTool(_Model):
    type: HostedToolType


ToolParam = Annotated[FunctionTool | NamespaceTool | HostedTool, Field(discriminator="type")]


class TextFormat(_Model):
    type: Literal["text"]


class JSONObjectFormat(_Model):
    type: Literal["json_object"]


class JSONSchemaFormat(_Model):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    type: Literal["json_schema"]
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_\-]+$")
    json_schema: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None

    @field_validator("json_schema")
    @classmethod
    def _schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        check_schema_size(value)
        check_schema(value)
        return value


class TextConfig(_Model):
    format: Annotated[
        TextFormat | JSONObjectFormat | JSONSchemaFormat, Field(discriminator="type")
    ] = Field(default_factory=lambda: TextFormat(type="text"))


class ReasoningConfig(_Model):
    effort: ReasoningEffort | None = None
    summary: SummaryMode | None = None
    generate_summary: SummaryMode | None = None  # the older spelling of summary


# ---- the request -------------------------------------------------------------------------


class ResponsesRequest(_Model):
    """``POST /v1/responses``, validated."""

    model: str = Field(min_length=1)
    input: list[InputItem]
    instructions: str | None = None
    previous_response_id: str | None = None
    tools: list[ToolParam] = Field(default_factory=list, max_length=MAX_TOOLS)
    # "none" | "auto" | "required" | {"type": "function", "name"} |
    # {"type": "allowed_tools", "mode", "tools"}; checked by _check_tool_choice.
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    max_output_tokens: Int64 | None = Field(default=None, ge=1)
    max_tool_calls: Int64 | None = Field(default=None, ge=1)
    temperature: Float32 | None = Field(default=None, ge=0, le=2)
    top_p: Float32 | None = Field(default=None, ge=0, le=1)
    top_logprobs: Int | None = Field(default=None, ge=0, le=20)
    text: TextConfig = Field(default_factory=TextConfig)
    reasoning: ReasoningConfig | None = None
    include: list[str] | None = None
    metadata: dict[str, str] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    store: bool = True
    stream: bool = False
    background: bool | None = None
    conversation: Any = None
    prompt: Any = None
    user: str | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _string_input(cls, value: Any) -> Any:
        """A string is one user message (as OpenAI reads it)."""
        if isinstance(value, str):
            return [{"type": "message", "role": "user", "content": value}]
        return value

    @field_validator("tool_choice")
    @classmethod
    def _check_tool_choice(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        if isinstance(value, str):
            if value not in ("none", "auto", "required"):
                raise ValueError("must be 'none', 'auto', 'required' or an object")
            return value
        kind = value.get("type")
        if kind == "function":
            if not isinstance(value.get("name"), str):
                raise ValueError("a function choice needs the function's 'name'")
        elif kind == "allowed_tools":
            if value.get("mode") not in ("auto", "required"):
                raise ValueError("allowed_tools needs mode 'auto' or 'required'")
            tools = value.get("tools")
            if not isinstance(tools, list) or not all(
                isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools
            ):
                raise ValueError("allowed_tools needs 'tools', a list of {type, name}")
        elif kind in HOSTED_TOOL_TYPES:
            raise ValueError(f"'{clip(str(kind))}' is a tool OpenAI runs; Sidelight cannot call it")
        else:
            raise ValueError("the object must have type 'function' or 'allowed_tools'")
        return value

    @field_validator("user")
    @classmethod
    def _check_user(cls, value: str | None) -> str | None:
        if value is not None and (len(value) > MAX_USER_BYTES or utf8_size(value) > MAX_USER_BYTES):
            raise ValueError(f"must be at most {MAX_USER_BYTES} bytes (an id for the end user)")
        return value

    @field_validator("metadata")
    @classmethod
    def _check_metadata(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None:
            if len(value) > MAX_METADATA_KEYS:
                raise ValueError(f"at most {MAX_METADATA_KEYS} keys are allowed")
            if any(len(k) > 64 or len(v) > 512 for k, v in value.items()):
                raise ValueError("keys are at most 64 characters and values at most 512")
        return value

    @model_validator(mode="after")
    def _unsupported(self) -> ResponsesRequest:
        if self.background:
            raise ValueError("background: background responses are not supported")
        if self.conversation is not None:
            raise ValueError(
                "conversation: conversations are not supported; continue one with "
                "previous_response_id"
            )
        if self.prompt is not None:
            raise ValueError(
                "prompt: stored prompt templates are not supported; send instructions and input"
            )
        return self

    @property
    def wants_logprobs(self) -> bool:
        return LOGPROBS_INCLUDE in (self.include or [])

    @property
    def summary(self) -> SummaryMode | None:
        """The reasoning summary asked for (``None``: the thinking goes out as raw text)."""
        if self.reasoning is None:
            return None
        return self.reasoning.summary or self.reasoning.generate_summary

    def unknown_fields(self) -> list[str]:
        return sorted((self.model_extra or {}).keys())


def parse_request(data: dict[str, Any]) -> ResponsesRequest:
    """Validate a parsed JSON body.

    Raises:
        APIError: 400 naming the field (``param``) for anything the request cannot be.
    """
    _check_kinds(data)
    try:
        return ResponsesRequest.model_validate(data)
    except ValidationError as exc:
        raise _field_error(exc) from exc


def parse_items(items: list[Any], field: str) -> list[InputItem]:
    """Validate stored items (a previous response's input and output) as input items."""
    try:
        return ResponsesRequest.model_validate({"model": "-", "input": items}).input
    except ValidationError as exc:
        raise _field_error(exc, rename={"input": field}) from exc


def _check_kinds(data: dict[str, Any]) -> None:
    """Refuse item and tool types Sidelight has no use for, with a sentence saying so."""
    items = data.get("input")
    for i, item in enumerate(items if isinstance(items, list) else []):
        kind = _item_kind(item)
        if kind is not None and kind not in ITEM_TYPES:
            raise _refusal(
                f"input.{i}.type",
                f"'{clip(kind)}' items are not supported; send message, function_call, "
                "function_call_output or reasoning items",
            )
    tools = data.get("tools")
    for i, tool in enumerate(tools if isinstance(tools, list) else []):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if isinstance(kind, str) and kind not in TOOL_TYPES:
            raise _refusal(
                f"tools.{i}.type",
                f"'{clip(kind)}' tools are not supported; Sidelight offers the model function tools",
            )
        if kind in HOSTED_TOOL_TYPES and kind not in OMITTED_TOOL_TYPES:
            raise _refusal(
                f"tools.{i}.type",
                f"'{kind}' is a tool OpenAI runs on its servers; Sidelight cannot run it, and "
                "an answer without it would not be the one asked for: send function tools",
            )


def _refusal(param: str, message: str) -> APIError:
    return APIError(400, f"{param}: {message}", param=param, code="unsupported_value")


def _field_error(exc: ValidationError, rename: dict[str, str] | None = None) -> APIError:
    error = exc.errors()[0]
    param = _param(error["loc"], rename or {}) or None
    message = str(error["msg"]).removeprefix("Value error, ")
    named = message.split(":", 1)[0]
    if param is None and named in ResponsesRequest.model_fields:
        param, message = named, message.split(":", 1)[1].strip()
    text = f"{param}: {message}" if param else message
    return APIError(400, text, param=param, code="invalid_value")


# Pydantic puts a tagged union's tag into an error's location: after a list index for items,
# parts and tools, after "format" for text formats. They are not fields, so params skip them.
_PART_TYPES = {"input_text", "output_text", "refusal", "input_image", "input_file", "input_audio"}
_INDEXED_TAGS = ITEM_TYPES | TOOL_TYPES | _PART_TYPES
_FORMAT_TAGS = frozenset({"text", "json_object", "json_schema"})


def _param(loc: tuple[int | str, ...], rename: dict[str, str]) -> str:
    """``input.0.content.1`` from pydantic's location, without the union tags in it."""
    parts: list[str] = []
    for i, part in enumerate(loc):
        after = loc[i - 1] if i else None
        if (isinstance(after, int) and part in _INDEXED_TAGS) or (
            after == "format" and part in _FORMAT_TAGS
        ):
            continue
        parts.append(str(part))
    if parts:
        parts[0] = rename.get(parts[0], parts[0])
    return ".".join(parts)


def declared(model: BaseModel) -> dict[str, Any]:
    """``model`` as JSON without the unknown fields it accepted (``extra="allow"``), at every
    level: what a response echoes and the store keeps is what Sidelight read, so a client
    cannot have megabytes it sent beside the known fields written to disk."""
    out: dict[str, Any] = {}
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        if value is not None:
            out[info.alias or name] = _declared_value(value)
    return out


def _declared_value(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return declared(value)
    if isinstance(value, list):
        return [_declared_value(v) for v in value]
    return value
