"""A validated Responses request -> the pipeline's :class:`GenerateRequest`.

Items become the chat messages the templates expect: ``instructions`` and leading
``system``/``developer`` messages one system message, ``function_call`` items the assistant
turn's ``tool_calls`` (consecutive calls, and a call right after the assistant's text, are
one turn), ``function_call_output`` items ``tool`` messages, and a ``reasoning`` item the
``reasoning_content`` of the assistant turn after it. A previous response's items (with
``previous_response_id``) come first; its ``instructions`` do not carry over, as in OpenAI's
API.

Function tools are offered in the chat-completions shape; a namespace's functions are
offered by name (their calls say the namespace); web search, which only OpenAI can run, is
left out (the protocol refuses the other tools OpenAI runs).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from engine.echo import clip
from engine.server.errors import APIError
from engine.server.fields import MAX_TOOLS
from engine.server.images import ImageList, image_from_url
from engine.server.pipeline import GenerateRequest, ToolChoice, ToolMode
from engine.server.responses import protocol
from engine.server.responses.protocol import (
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    InputItem,
    MessageItem,
    NamespaceTool,
    ResponsesRequest,
)
from engine.server.sampling import sampling_params

logger = logging.getLogger(__name__)

# Efforts the chat templates that take one (gpt-oss) know by name.
_TEMPLATE_EFFORTS = frozenset({"low", "medium", "high"})
# What the engine's refusals name (a prompt over the context), as this API names it.
_FIELD_NAMES = {"messages": "input", "max_tokens": "max_output_tokens"}


@dataclass(frozen=True)
class Turn:
    """What one request asks of the pipeline, and what to keep of it.

    ``context`` is every input item of the conversation so far (a previous response's items,
    then this request's), as JSON, for the store; ``tools`` echo the offered function tools
    in the response; ``namespaces`` maps a namespaced function's name to its namespace.
    """

    request: GenerateRequest
    context: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    namespaces: dict[str, str] = field(default_factory=dict)


def translate(body: ResponsesRequest, history: list[dict[str, Any]] | None = None) -> Turn:
    """The turn for ``body``; ``history`` is a previous response's items (input + output).

    Raises:
        APIError: 400 naming the field for a request that is valid JSON but cannot be
            served (a ``tool_choice`` naming no offered tool, two tools of one name).
    """
    previous = protocol.parse_items(history, "previous_response_id") if history else []
    tools, echo, namespaces = _offered_tools(body)
    tools, choice = _tool_choice(body.tool_choice, tools)
    images = ImageList()
    messages = to_messages([*previous, *body.input], body.instructions, images, len(previous))
    if not any(m["role"] != "system" for m in messages):
        raise APIError(
            400, "input: send at least one message or item", param="input", code="invalid_value"
        )
    request = GenerateRequest(
        model=body.model,
        dialect="responses",
        messages=messages,
        max_tokens=body.max_output_tokens,
        sampling=sampling_params(temperature=body.temperature, top_p=body.top_p),
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=body.parallel_tool_calls,
        response_schema=_schema(body),
        schema_param="text.format",
        thinking=_thinking(body),
        chat_template_kwargs=_template_kwargs(body),
        logprobs=body.wants_logprobs,
        split_reasoning=True,  # reasoning items, as for chat
        field_names=_FIELD_NAMES,
        images=images.all(),
    )
    context = [*(history or []), *(_as_json(item) for item in body.input)]
    return Turn(request, context, echo, namespaces)


def to_messages(
    items: list[InputItem],
    instructions: str | None = None,
    images: ImageList | None = None,
    first_input: int = 0,
) -> list[dict[str, Any]]:
    """Chat messages for a list of items (see the module docstring). A message's
    ``input_image`` parts go to ``images`` (``items[first_input:]`` are the request's
    ``input``, the ones before a previous response's, named so in refusals)."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    thinking = ""
    for k, item in enumerate(items):
        if isinstance(item, MessageItem):
            role = "system" if item.role in ("system", "developer") else item.role
            message: dict[str, Any] = {"role": role, "content": item.text()}
            where = f"input.{k - first_input}" if k >= first_input else "previous_response_id"
            indices = _images(item, where, images)
            if indices:
                message["images"] = indices
            if role == "assistant" and thinking:
                message["reasoning_content"], thinking = thinking, ""
            messages.append(message)
        elif isinstance(item, FunctionCallItem):
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            if not messages or messages[-1]["role"] != "assistant":
                messages.append({"role": "assistant", "content": ""})
            turn = messages[-1]
            turn.setdefault("tool_calls", []).append(call)
            if thinking:
                turn["reasoning_content"], thinking = thinking, ""
        elif isinstance(item, FunctionCallOutputItem):
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text()})
        else:
            thinking = item.text()
    return _one_system_message(messages)


def _images(item: MessageItem, where: str, images: ImageList | None) -> list[int]:
    """The indices of ``item``'s ``input_image`` parts, added to ``images``."""
    indices = []
    for j, part in enumerate(item.content):
        if isinstance(part, protocol.ImagePart) and part.image_url is not None:
            ref = image_from_url(part.image_url, f"{where}.content.{j}.image_url")
            if images is None:
                raise APIError(400, f"{ref.field}: images are not taken here", param=ref.field)
            indices.append(images.add(ref))
    return indices


def _one_system_message(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Join the leading system messages: many templates take one system prompt, first."""
    leading = 0
    while leading < len(messages) and messages[leading]["role"] == "system":
        leading += 1
    if leading < 2:
        return messages
    text = "\n\n".join(m["content"] for m in messages[:leading] if m["content"])
    return [{"role": "system", "content": text}, *messages[leading:]]


def _offered_tools(
    body: ResponsesRequest,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, str]]:
    """Template tools, the tools to echo in the response, and namespace by function name."""
    tools: list[dict[str, Any]] = []
    echo: list[dict[str, Any]] = []
    namespaces: dict[str, str] = {}
    hosted: list[str] = []
    seen: set[str] = set()

    def offer(tool: FunctionTool, namespace: str | None = None) -> None:
        if tool.name in seen:
            raise APIError(
                400,
                f"tools: more than one tool is named '{tool.name}'",
                param="tools",
                code="invalid_value",
            )
        seen.add(tool.name)
        function = tool.model_dump(include={"name", "description", "parameters"}, exclude_none=True)
        tools.append({"type": "function", "function": function})
        if namespace:
            namespaces[tool.name] = namespace

    for tool in body.tools:
        if isinstance(tool, FunctionTool):
            offer(tool)
        elif isinstance(tool, NamespaceTool):
            for inner in tool.tools:
                offer(inner, tool.name)
        else:
            hosted.append(tool.type)
            continue
        echo.append(protocol.declared(tool))
    if hosted:
        logger.info("responses: not offering %s (tools only OpenAI runs)", ", ".join(hosted))
    if len(tools) > MAX_TOOLS:
        raise APIError(
            400,
            f"tools: at most {MAX_TOOLS} function tools are allowed, namespaces included",
            param="tools",
            code="invalid_value",
        )
    return tools, echo, namespaces


def _tool_choice(
    choice: str | dict[str, Any], tools: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], ToolChoice]:
    """The tools to offer and the pipeline's choice for ``tool_choice`` (already shape-checked)."""
    names = {tool["function"]["name"] for tool in tools}
    if isinstance(choice, dict) and choice["type"] == "allowed_tools":
        allowed = {tool["name"] for tool in choice["tools"]}
        _check_names(allowed - names)
        tools = [tool for tool in tools if tool["function"]["name"] in allowed]
        choice = choice["mode"]
    if isinstance(choice, dict):
        _check_names({choice["name"]} - names)
        return tools, ToolChoice("required", choice["name"])
    if choice == "required" and not tools:
        raise APIError(
            400,
            "tool_choice: 'required' needs at least one function tool in tools",
            param="tool_choice",
            code="invalid_value",
        )
    modes: dict[str, ToolMode] = {"none": "none", "required": "required"}
    return tools, ToolChoice(modes.get(choice, "auto"))


def _check_names(missing: set[str]) -> None:
    if missing:
        raise APIError(
            400,
            f"tool_choice: no function tool named '{clip(sorted(missing)[0])}' in tools",
            param="tool_choice",
            code="invalid_value",
        )


def _schema(body: ResponsesRequest) -> dict[str, Any] | None:
    text_format = body.text.format
    if isinstance(text_format, protocol.JSONSchemaFormat):
        return text_format.json_schema
    if isinstance(text_format, protocol.JSONObjectFormat):
        return {"type": "object"}
    return None


def _thinking(body: ResponsesRequest) -> bool | None:
    """``effort: none`` switches thinking off; any other effort on; no effort: the default."""
    effort = body.reasoning.effort if body.reasoning else None
    return None if effort is None else effort != "none"


def _template_kwargs(body: ResponsesRequest) -> dict[str, Any]:
    effort = body.reasoning.effort if body.reasoning else None
    return {"reasoning_effort": effort} if effort in _TEMPLATE_EFFORTS else {}


def _as_json(item: InputItem) -> dict[str, Any]:
    """An item as the store keeps it: its known fields only (see :func:`protocol.declared`)."""
    return protocol.declared(item)
