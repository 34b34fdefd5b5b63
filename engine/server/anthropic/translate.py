"""A validated Messages request -> the pipeline's :class:`GenerateRequest`.

Anthropic's conversation becomes the OpenAI-shaped messages chat templates read:

- ``system`` (a string or text blocks) and the text of the ``system`` turns inside
  ``messages`` (a beta Claude Code uses) that come before the first assistant turn become
  one leading system message: many chat templates (Qwen3, Llama 3, Gemma) accept a system
  message only first. A later ``system`` turn, or one cleared at the next user message,
  stays where it is, as ``<system-reminder>`` text of a user turn (Claude Code's own form
  for notes in a user turn): joined to the head, each new one would change the prompt's
  first tokens, and the engine's prefix cache would recompute the whole conversation on
  that turn (and again when a cleared one goes). A turn with ``clear_at:
  next_user_message`` is left out once a later user turn exists.
- ``tool_result`` blocks become ``tool`` messages (before the rest of their user turn);
  ``tool_use`` blocks become the assistant turn's ``tool_calls`` (arguments as objects, as
  the templates print them); ``thinking`` becomes its ``reasoning_content``.
- Consecutive turns of one role are merged, as Anthropic merges them.
- Images, documents and Anthropic's server-side blocks are refused with a 400 naming the
  block: no model here can read them yet, and leaving them out would change the question.
- A conversation that ends with an assistant turn (a prefill) is refused: templates cannot
  continue a turn, and newer Claude models refuse it too.

Tools: each client tool becomes an OpenAI function tool. Tools marked ``defer_loading``
are offered only once a ``tool_reference`` (a tool-search result) or a ``tool_addition``
names them; ``tool_removal`` withdraws one. The chat template lists the tools offered from
the start (``GenerateRequest.listed_tools``); one offered later is described where the
conversation offers it ("Tool loaded: NAME" and its definition as JSON), as Anthropic
expands a ``tool_reference`` in place: in the template's list, which most templates put in
the prompt's first message, each tool Claude Code loads (its ToolSearch adds it to
``tools``) would change the prompt's head and the prefix cache would recompute the whole
conversation after it.

Pure functions of the request: safe on any thread.
"""

from __future__ import annotations

import json
from typing import Any

from engine.echo import clip
from engine.server.anthropic import protocol
from engine.server.errors import APIError
from engine.server.images import ImageList, ImageRef, image_from_base64, image_from_url
from engine.server.pipeline import GenerateRequest, ToolChoice
from engine.server.sampling import sampling_params

# Claude Code's first system block is a header for Anthropic's billing, not for the model.
_BILLING_HEADER = "x-anthropic-billing-header:"


def generate_request(body: protocol.CountTokensRequest) -> GenerateRequest:
    """The pipeline request for ``body`` (a :class:`protocol.MessagesRequest` carries
    sampling and limits; a count-only request does not).

    Raises:
        APIError: 400 naming the block or field Sidelight cannot use.
    """
    tools = _OfferedTools(body.tools or [])
    choice = _tool_choice(body.tool_choice, tools)
    conversation = _Conversation(tools)
    messages = conversation.build(body.system, body.messages)
    images = conversation.images.all()
    thinking = None
    if body.thinking is not None and body.thinking.type != "adaptive":
        thinking = body.thinking.type == "enabled"
    parallel = not (body.tool_choice and body.tool_choice.disable_parallel_tool_use)
    listed = tools.listed()
    if not isinstance(body, protocol.MessagesRequest):
        return GenerateRequest(
            model=body.model,
            dialect="anthropic",
            messages=messages,
            tools=tools.functions(),
            listed_tools=listed,
            tool_choice=choice,
            parallel_tool_calls=parallel,
            thinking=thinking,
            images=images,
        )
    return GenerateRequest(
        model=body.model,
        dialect="anthropic",
        messages=messages,
        max_tokens=body.max_tokens,
        stop=tuple(body.stop_sequences or ()),
        sampling=sampling_params(temperature=body.temperature, top_p=body.top_p, top_k=body.top_k),
        tools=tools.functions(),
        listed_tools=listed,
        tool_choice=choice,
        parallel_tool_calls=parallel,
        thinking=thinking,
        split_reasoning=True,  # any model's leading <think> block is a thinking block
        images=images,
    )


def refuse(param: str, message: str) -> APIError:
    return APIError(400, f"{param}: {message}", param=param, code="invalid_request")


def _tool_choice(choice: protocol.ToolChoice | None, tools: _OfferedTools) -> ToolChoice:
    if choice is None or choice.type == "auto":
        return ToolChoice("auto")
    if choice.type == "none":
        return ToolChoice("none")
    if choice.type == "any":
        return ToolChoice("required")
    assert choice.name is not None  # checked by the protocol model
    tools.add(choice.name, "tool_choice.name")
    return ToolChoice("required", choice.name)


class _OfferedTools:
    """The tools shown to the model, as tool changes leave them: those offered from the
    start in ``tools`` order (the template lists them), then those offered later, in the
    order the conversation offers them (described in place, see :meth:`announce`)."""

    def __init__(self, tools: list[protocol.Tool]) -> None:
        self._declared = {tool.name: tool for tool in tools}
        self._offered = {tool.name: tool for tool in tools if not tool.defer_loading}
        self._listed = frozenset(self._offered)

    def add(self, name: str, param: str) -> str | None:
        """Offer the declared tool ``name``; its description for the conversation when the
        template does not list it."""
        tool = self._declared.get(name)
        if tool is None:
            raise refuse(param, f"no tool named '{clip(name)}' in tools")
        self._offered[name] = tool
        return self.announce(name)

    def define(self, definition: Any, param: str) -> str | None:
        try:
            tool = protocol.Tool.model_validate(definition)
        except ValueError as exc:
            raise refuse(param, f"not a valid tool definition: {exc}") from exc
        self._declared[tool.name] = tool
        self._offered[tool.name] = tool
        return self.announce(tool.name)

    def announce(self, name: str) -> str | None:
        """What the conversation says where tool ``name`` is offered (None: the template
        lists it): its definition in the function shape the templates list tools in."""
        if name in self._listed:
            return None
        function = json.dumps(self._declared[name].to_function(), ensure_ascii=False)
        return f"Tool loaded: {name}\n{function}"

    def remove(self, name: str) -> None:
        self._offered.pop(name, None)

    def _in_order(self) -> list[protocol.Tool]:
        listed = [t for name, t in self._offered.items() if name in self._listed]
        return listed + [t for name, t in self._offered.items() if name not in self._listed]

    def functions(self) -> list[dict[str, Any]]:
        return [tool.to_function() for tool in self._in_order()]

    def listed(self) -> int | None:
        """How many of :meth:`functions` (the first ones) the template lists; None: all
        (also when it would list none: a template without tools would not say how to call
        one)."""
        count = sum(1 for name in self._offered if name in self._listed)
        return count if 0 < count < len(self._offered) else None


class _Conversation:
    """Builds the template messages for one request (see the module docstring)."""

    def __init__(self, tools: _OfferedTools) -> None:
        self._tools = tools
        self._system: list[str] = []
        self._turns: list[dict[str, Any]] = []
        self._call_names: dict[str, str] = {}  # tool_use id -> tool name
        self.images = ImageList()  # every image block, in order

    def build(
        self, system: list[protocol.TextBlock], messages: list[protocol.Message]
    ) -> list[dict[str, Any]]:
        self._system.append(
            "\n".join(b.text for b in system if not b.text.startswith(_BILLING_HEADER))
        )
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
        first_reply = next(
            (i for i, m in enumerate(messages) if m.role == "assistant"), len(messages)
        )
        for i, message in enumerate(messages):
            where = f"messages.{i}"
            if message.role == "system":
                cleared = message.clear_at == "next_user_message" and i < last_user
                in_head = i < first_reply and message.clear_at != "next_user_message"
                self._system_turn(message, where, cleared, in_head)
            elif message.role == "user":
                self._user_turn(message, where)
            else:
                self._assistant_turn(message, where)
        if messages[-1].role == "assistant":
            raise refuse(
                f"messages.{len(messages) - 1}",
                "the conversation ends with an assistant turn (a prefill), which Sidelight "
                "cannot continue; end it with a user turn",
            )
        system_text = "\n\n".join(text for text in self._system if text)
        head = [{"role": "system", "content": system_text}] if system_text else []
        return head + self._turns

    def _system_turn(
        self, message: protocol.Message, where: str, cleared: bool, in_head: bool
    ) -> None:
        texts = []
        for j, block in enumerate(message.content):
            at = f"{where}.content.{j}"
            if isinstance(block, protocol.TextBlock):
                texts.append(block.text)
            elif isinstance(block, protocol.ToolChangeBlock):
                described = self._tool_change(block, at)
                if described is not None:
                    texts.append(described)
            else:
                raise _unusable(block, at, "system")
        text = "\n".join(texts)
        if cleared or not text:
            return
        if in_head:
            self._system.append(text)
        else:  # in place: the turns before it, and so the prompt's head, stay as they were
            self._add("user", {"content": _reminder(text)})

    def _tool_change(self, block: protocol.ToolChangeBlock, at: str) -> str | None:
        """Apply a tool change; what the conversation says of it there (None: nothing)."""
        target = block.tool
        kind, name = target.get("type"), target.get("name")
        if block.type == "tool_addition" and kind == "tool_definition":
            return self._tools.define(target.get("definition"), f"{at}.tool.definition")
        if kind == "tool_reference" and isinstance(name, str):
            if block.type == "tool_addition":
                return self._tools.add(name, f"{at}.tool.name")
            self._tools.remove(name)
            return None
        raise refuse(
            f"{at}.tool",
            "only tool_reference (a tool in tools) and tool_definition tool changes are supported",
        )

    def _user_turn(self, message: protocol.Message, where: str) -> None:
        texts = []
        pictures: list[int] = []
        for j, block in enumerate(message.content):
            at = f"{where}.content.{j}"
            if isinstance(block, protocol.TextBlock):
                texts.append(block.text)
            elif isinstance(block, protocol.ImageBlock):
                pictures.append(self.images.add(_image(block, at)))
            elif isinstance(block, protocol.ToolResultBlock):
                self._turns.append(self._tool_result(block, at))
            else:
                raise _unusable(block, at, "user")
        if texts or pictures:
            self._add("user", _user_fields(texts, pictures))

    def _tool_result(self, block: protocol.ToolResultBlock, at: str) -> dict[str, Any]:
        pieces = []
        pictures = []
        for k, part in enumerate(block.content):
            if isinstance(part, protocol.TextBlock):
                pieces.append(part.text)
            elif isinstance(part, protocol.ImageBlock):  # a screenshot a tool returned
                pictures.append(self.images.add(_image(part, f"{at}.content.{k}")))
            elif isinstance(part, protocol.ToolReferenceBlock):
                described = self._tools.add(part.tool_name, f"{at}.content.{k}.tool_name")
                pieces.append(described or f"Tool loaded: {part.tool_name}")
            else:
                raise _unusable(part, f"{at}.content.{k}", "tool_result")
        content = "\n".join(pieces)
        turn: dict[str, Any] = {
            "role": "tool",
            "tool_call_id": block.tool_use_id,
            "content": content,
        }
        name = self._call_names.get(block.tool_use_id)
        if name is not None:
            turn["name"] = name
        if pictures:
            turn["images"] = pictures
        return turn

    def _assistant_turn(self, message: protocol.Message, where: str) -> None:
        texts: list[str] = []
        reasoning: list[str] = []
        calls: list[dict[str, Any]] = []
        for j, block in enumerate(message.content):
            at = f"{where}.content.{j}"
            if isinstance(block, protocol.TextBlock):
                texts.append(block.text)
            elif isinstance(block, protocol.ThinkingBlock):
                reasoning.append(block.thinking)
            elif isinstance(block, protocol.RedactedThinkingBlock):
                continue
            elif isinstance(block, protocol.ToolUseBlock):
                self._call_names[block.id] = block.name
                function = {"name": block.name, "arguments": block.input}
                calls.append({"id": block.id, "type": "function", "function": function})
            else:
                raise _unusable(block, at, "assistant")
        fields: dict[str, Any] = {"content": "\n".join(texts)}
        if calls:
            fields["tool_calls"] = calls
        if any(reasoning):
            fields["reasoning_content"] = "\n".join(r for r in reasoning if r)
        self._add("assistant", fields)

    def _add(self, role: str, fields: dict[str, Any]) -> None:
        """Append a turn, merged into the previous one when that has the same role."""
        last = self._turns[-1] if self._turns else None
        if last is None or last["role"] != role:
            self._turns.append({"role": role, **fields})
            return
        if fields.get("content"):
            joined = [last["content"], fields["content"]]
            last["content"] = "\n\n".join(text for text in joined if text)
        if fields.get("tool_calls"):
            last["tool_calls"] = [*last.get("tool_calls", []), *fields["tool_calls"]]
        if fields.get("images"):
            last["images"] = [*last.get("images", []), *fields["images"]]
        if fields.get("reasoning_content"):
            joined = [last.get("reasoning_content", ""), fields["reasoning_content"]]
            last["reasoning_content"] = "\n".join(text for text in joined if text)


def _reminder(text: str) -> str:
    """A system turn's text as a note inside a user turn (already one: unchanged)."""
    if text.lstrip().startswith("<system-reminder>"):
        return text
    return f"<system-reminder>\n{text}\n</system-reminder>"


def _user_fields(texts: list[str], pictures: list[int]) -> dict[str, Any]:
    fields: dict[str, Any] = {"content": "\n".join(texts)}
    if pictures:
        fields["images"] = pictures
    return fields


def _image(block: protocol.ImageBlock, at: str) -> ImageRef:
    """An image block's data: ``source.type`` ``base64`` (a ``url`` source only as a data
    URL: remote URLs are never fetched)."""
    source = block.source or {}
    kind = source.get("type")
    if kind == "base64":
        data = source.get("data")
        if not isinstance(data, str):
            raise refuse(f"{at}.source.data", "an image's base64 data must be a string")
        media = source.get("media_type")
        if media is not None and not (isinstance(media, str) and media.startswith("image/")):
            raise refuse(f"{at}.source.media_type", "must be an image type (image/png, ...)")
        return image_from_base64(data, f"{at}.source.data")
    if kind == "url" and isinstance(source.get("url"), str):
        return image_from_url(source["url"], f"{at}.source.url")
    raise refuse(
        f"{at}.source",
        "an image needs source.type 'base64' with its data (file and remote sources are "
        "not supported)",
    )


def _unusable(block: Any, at: str, role: str) -> APIError:
    kind = getattr(block, "type", "?")
    if kind == "image":
        return refuse(at, f"an image block cannot be part of a {role} turn")
    if kind in ("tool_use", "tool_result", "thinking"):
        return refuse(at, f"a {clip(kind)} block cannot be part of a {role} turn")
    return refuse(at, f"content blocks of type '{clip(kind)}' are not supported by Sidelight")
