"""Request models and response builders of Anthropic's Messages API (``/v1/messages``).

Field names and shapes are the API reference's, as the ``anthropic`` SDKs send and read
them (Claude Code bundles the TypeScript one). Requests accept unknown fields: Claude Code
sends ``context_management``, ``output_config``, ``metadata`` and other fields that only
Anthropic's service acts on; the routes log them and go on. Every field Sidelight uses is
validated here, so a bad one is a 400 naming it, in Anthropic's error shape.

Content blocks are told apart by ``type``. Types this server cannot use are still parsed
(:class:`OtherBlock`), so :mod:`.translate` can refuse them with a message naming the type
and where it is, instead of a list of the types expected.

Responses are plain dicts built by the small functions at the end, so each streamed event
is cheap and has exactly Anthropic's shape.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    model_validator,
)

from engine.echo import clip
from engine.server.fields import (
    INT64_MAX,
    MAX_STOP_SEQUENCES,
    MAX_TOOLS,
    Float32,
    Int,
    Int64,
    check_schema,
    check_schema_size,
)

# The version Claude Code and the SDKs send in ``anthropic-version``; any value is accepted.
API_VERSION = "2023-06-01"


class _Model(BaseModel):
    # cache_control, citations and similar fields are accepted and have no effect here.
    model_config = ConfigDict(extra="allow")


class TextBlock(_Model):
    type: Literal["text"]
    text: str


class ImageBlock(_Model):
    type: Literal["image"]
    source: dict[str, Any] | None = None


class ToolUseBlock(_Model):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]


class ToolReferenceBlock(_Model):
    """A tool-search result inside ``tool_result`` content: the named tool is now offered."""

    type: Literal["tool_reference"]
    tool_name: str = Field(min_length=1)


class OtherBlock(_Model):
    """Any block type this server does not use (documents, server tools, ...)."""

    type: str


def _as_blocks(value: Any) -> Any:
    """A string where blocks may be given is one text block (so errors name the block, not
    a choice between a string and a list); ``None`` is no blocks."""
    if value is None:
        return []
    return [{"type": "text", "text": value}] if isinstance(value, str) else value


def _kind(known: frozenset[str]) -> Any:
    def kind(value: Any) -> str:
        name = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
        return name if name in known else "other"

    return Discriminator(kind)


ResultPart = Annotated[
    Annotated[TextBlock, Tag("text")]
    | Annotated[ImageBlock, Tag("image")]
    | Annotated[ToolReferenceBlock, Tag("tool_reference")]
    | Annotated[OtherBlock, Tag("other")],
    _kind(frozenset({"text", "image", "tool_reference"})),
]


class ToolResultBlock(_Model):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: Annotated[list[ResultPart], BeforeValidator(_as_blocks)] = Field(default_factory=list)
    is_error: bool = False


class ThinkingBlock(_Model):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(_Model):
    """Encrypted thinking from Anthropic's service: it means nothing to a local model."""

    type: Literal["redacted_thinking"]


class ToolChangeBlock(_Model):
    """A mid-conversation change to the offered tools (in a ``system`` message).

    ``tool`` is ``{"type": "tool_reference", "name"}`` (a tool in ``tools``) or, for an
    addition, ``{"type": "tool_definition", "definition": {...}}`` (a tool itself).
    """

    type: Literal["tool_addition", "tool_removal"]
    tool: dict[str, Any]


_BLOCK_TYPES = frozenset(
    {
        "text",
        "image",
        "tool_use",
        "tool_result",
        "thinking",
        "redacted_thinking",
        "tool_addition",
        "tool_removal",
    }
)

Block = Annotated[
    Annotated[TextBlock, Tag("text")]
    | Annotated[ImageBlock, Tag("image")]
    | Annotated[ToolUseBlock, Tag("tool_use")]
    | Annotated[ToolResultBlock, Tag("tool_result")]
    | Annotated[ThinkingBlock, Tag("thinking")]
    | Annotated[RedactedThinkingBlock, Tag("redacted_thinking")]
    | Annotated[ToolChangeBlock, Tag("tool_addition")]
    | Annotated[ToolChangeBlock, Tag("tool_removal")]
    | Annotated[OtherBlock, Tag("other")],
    _kind(_BLOCK_TYPES),
]


class Message(_Model):
    """One turn. ``system`` turns (a beta Claude Code uses) carry text and tool changes."""

    role: Literal["user", "assistant", "system"]
    content: Annotated[list[Block], BeforeValidator(_as_blocks)]
    # system turns only: "next_user_message" hides the turn once a later user turn exists.
    clear_at: Literal["next_user_message", "never"] | None = None


class Tool(_Model):
    """A client tool (``type`` absent or ``custom``); any other type is a server tool."""

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_\-]+$")
    type: str | None = None
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    # Anthropic's tool search: not shown to the model until a tool_reference or a
    # tool_addition names it.
    defer_loading: bool = False

    @model_validator(mode="after")
    def _client_tool(self) -> Tool:
        if self.type not in (None, "custom"):
            raise ValueError(
                f"'{clip(self.type)}' is one of Anthropic's server tools, which Sidelight does not "
                "run; send client tools (name, description, input_schema) instead"
            )
        if self.input_schema is None:
            raise ValueError("input_schema: Field required")
        check_schema_size(self.input_schema)
        check_schema(self.input_schema, "input_schema")
        return self

    def to_function(self) -> dict[str, Any]:
        """The OpenAI function-tool shape the chat templates read."""
        function: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            function["description"] = self.description
        function["parameters"] = self.input_schema
        return {"type": "function", "function": function}


class ToolChoice(_Model):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False

    @model_validator(mode="after")
    def _named(self) -> ToolChoice:
        if self.type == "tool" and not self.name:
            raise ValueError("name: required when type is 'tool'")
        return self


class ThinkingConfig(_Model):
    """``enabled`` and ``disabled`` switch the model's thinking in its chat template;
    ``adaptive`` leaves the model's default. ``budget_tokens`` cannot be enforced and is
    accepted as a hint; ``display: omitted`` sends thinking blocks without their text."""

    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: Int64 | None = Field(default=None, ge=0)
    display: Literal["summarized", "omitted"] | None = None


class _Request(_Model):
    def unknown_fields(self) -> list[str]:
        return sorted((self.model_extra or {}).keys())


class CountTokensRequest(_Request):
    """``POST /v1/messages/count_tokens``: what the prompt of a Messages request holds."""

    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    system: Annotated[list[TextBlock], BeforeValidator(_as_blocks)] = Field(default_factory=list)
    tools: list[Tool] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None

    @model_validator(mode="after")
    def _choice_names_a_tool(self) -> CountTokensRequest:
        choice, names = self.tool_choice, {t.name for t in self.tools or []}
        if choice is not None and choice.type in ("any", "tool") and not names:
            raise ValueError(f"tool_choice: type '{choice.type}' needs at least one tool in tools")
        if choice is not None and choice.type == "tool" and choice.name not in names:
            raise ValueError(f"tool_choice: no tool named '{clip(str(choice.name))}' in tools")
        return self


class MessagesRequest(CountTokensRequest):
    """``POST /v1/messages``. ``max_tokens`` is required, as Anthropic requires it."""

    max_tokens: Annotated[Int, Field(ge=1, le=INT64_MAX)]
    stop_sequences: list[Annotated[str, Field(min_length=1)]] | None = Field(
        default=None, max_length=MAX_STOP_SEQUENCES
    )
    stream: bool = False
    temperature: Float32 | None = Field(default=None, ge=0, le=1)
    top_p: Float32 | None = Field(default=None, ge=0, le=1)
    top_k: Int64 | None = Field(default=None, ge=0)  # 0: off


# ---- responses -------------------------------------------------------------------------

StopReason = Literal[
    "end_turn", "max_tokens", "stop_sequence", "tool_use", "model_context_window_exceeded"
]

# Anthropic's error type for each status (https://docs.claude.com/en/api/errors).
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def error_body(status: int, message: str) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}`` for an HTTP status."""
    kind = _ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def new_message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


def tool_use_id(call_id: str) -> str:
    """Anthropic's spelling of a tool-call id (``toolu_...``) for the parser's ``call_...``."""
    return "toolu_" + call_id.removeprefix("call_")


def usage(prompt_tokens: int, output_tokens: int, cached_tokens: int = 0) -> dict[str, int]:
    """Anthropic's usage for a prompt of ``prompt_tokens``, ``cached_tokens`` of them found in
    the prefix cache. Anthropic counts the cache apart: ``input_tokens`` is the rest, and the
    prompt is the sum (what Claude Code adds up as the context). Nothing is billed for
    writing the cache here, so ``cache_creation_input_tokens`` stays 0."""
    cached = min(max(cached_tokens, 0), prompt_tokens)
    return {
        "input_tokens": prompt_tokens - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": output_tokens,
    }


def message(
    mid: str,
    model: str,
    content: list[dict[str, Any]],
    stop_reason: StopReason | None,
    stop_sequence: str | None,
    usage_: dict[str, int],
) -> dict[str, Any]:
    return {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage_,
    }


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def thinking_block(thinking: str) -> dict[str, Any]:
    # No signature: nothing here checks one, and the SDKs accept an empty string.
    return {"type": "thinking", "thinking": thinking, "signature": ""}


def tool_use_block(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_use_id(call_id), "name": name, "input": arguments}


def event(name: str, data: dict[str, Any]) -> str:
    """One server-sent event with its ``event:`` line, as Anthropic streams them."""
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"event: {name}\ndata: {payload}\n\n"


def model_entry(card: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI ``/v1/models`` card as Anthropic's ``ModelInfo``."""
    created = datetime.fromtimestamp(int(card["created"]), tz=timezone.utc)
    context = card.get("context_length")
    return {
        "type": "model",
        "id": card["id"],
        "display_name": card["id"],
        "created_at": created.isoformat().replace("+00:00", "Z"),
        "lifecycle": "active",
        "max_input_tokens": context,
        "max_tokens": context,
    }


def model_page(cards: list[dict[str, Any]]) -> dict[str, Any]:
    """Anthropic's model list: chat models only (embedding models cannot take messages)."""
    entries = [model_entry(c) for c in cards if c.get("task", "chat") in ("chat", "vision")]
    return {
        "data": entries,
        "has_more": False,
        "first_id": entries[0]["id"] if entries else None,
        "last_id": entries[-1]["id"] if entries else None,
    }
