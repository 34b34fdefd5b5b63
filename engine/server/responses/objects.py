"""Response objects of OpenAI's Responses API, as plain dicts.

Built by these small functions only, so a stored response, a whole answer and the objects
inside streamed events have one shape (the shapes of the ``openai`` SDK's
``openai.types.responses`` models, which the tests validate them against).
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from engine.echo import clip
from engine.server.responses.protocol import ResponsesRequest, declared

Status = Literal["completed", "incomplete", "in_progress", "failed"]


def new_id(prefix: str) -> str:
    """An id like OpenAI's (``resp_`` + 48 hex digits); response ids are checked against it."""
    return f"{prefix}_{uuid.uuid4().hex}{uuid.uuid4().hex[:16]}"


def now() -> int:
    return int(time.time())


def message_item(
    item_id: str, text: str, status: Status, logprobs: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [output_text(text, logprobs)] if status != "in_progress" else [],
    }


def output_text(text: str, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def function_call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: Status, namespace: str | None
) -> dict[str, Any]:
    item = {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }
    if namespace:
        item["namespace"] = namespace
    return item


def reasoning_item(item_id: str, text: str | None, *, as_summary: bool) -> dict[str, Any]:
    """The model's thinking: as the summary when one was asked for, else as raw text.

    Local models have no separate summariser, so the thinking is its own summary. ``text``
    ``None`` is the item as first announced, still in progress.
    """
    done = text is not None
    summary = [{"type": "summary_text", "text": text}] if as_summary and done else []
    item: dict[str, Any] = {"id": item_id, "type": "reasoning", "summary": summary}
    if not as_summary:
        item["content"] = [{"type": "reasoning_text", "text": text}] if done else []
    item["status"] = "completed" if done else "in_progress"
    return item


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    """``input_tokens_details.cached_tokens``: of the input, found in the prefix cache."""
    return {
        "input_tokens": prompt_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
        "output_tokens": completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt_tokens + completion_tokens,
    }


def token_logprobs(items: list[tuple[str, float]]) -> list[dict[str, Any]]:
    """``output_text.logprobs`` (GenAI reports only the chosen token's probability)."""
    out = []
    for token, logprob in items:
        raw = list(token.encode("utf-8"))
        top = [{"token": token, "logprob": logprob, "bytes": raw}]
        out.append({"token": token, "logprob": logprob, "bytes": raw, "top_logprobs": top})
    return out


def response_object(
    body: ResponsesRequest,
    *,
    response_id: str,
    created_at: int,
    model: str,
    tools: list[dict[str, Any]],
) -> dict[str, Any]:
    """The response as ``response.created`` shows it: in progress, no output yet.

    The request's settings are echoed back as OpenAI does, their known fields only (a
    client's extra fields are not stored); ``tools`` are the function tools the model was
    offered.
    """
    text_format = declared(body.text.format)
    reasoning = None
    if body.reasoning is not None:
        reasoning = {"effort": body.reasoning.effort, "summary": body.summary}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": "in_progress",
        "background": False,
        "completed_at": None,
        "error": None,
        "incomplete_details": None,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "max_tool_calls": body.max_tool_calls,
        "model": model,
        "output": [],
        "parallel_tool_calls": body.parallel_tool_calls,
        "previous_response_id": body.previous_response_id,
        "reasoning": reasoning,
        "service_tier": "default",
        "store": body.store,
        "temperature": body.temperature,
        "text": {"format": text_format},
        "tool_choice": _tool_choice(body.tool_choice),
        "tools": tools,
        "top_logprobs": body.top_logprobs,
        "top_p": body.top_p,
        "truncation": body.truncation or "disabled",
        "usage": None,
        "user": body.user,
        "metadata": body.metadata or {},
    }


def _tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    """``tool_choice`` as echoed: a mode, or the keys of its shape (already checked)."""
    if isinstance(choice, str):
        return choice
    if choice["type"] == "allowed_tools":
        tools = [
            {"type": clip(str(t.get("type", "function"))), "name": t["name"]}
            for t in choice["tools"]
        ]
        return {"type": "allowed_tools", "mode": choice["mode"], "tools": tools}
    return {"type": choice["type"], "name": choice["name"]}
