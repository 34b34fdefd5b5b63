"""A validated ``/api/v1/chat`` request -> the pipeline's :class:`GenerateRequest`.

LM Studio's chat takes one user turn per request (``input``: a string, or text items that
make one message together) and keeps the conversation itself: ``previous_response_id``
continues a stored one. So the chat messages are the stored conversation (OpenAI-shaped,
as the chat templates read them), then the new user turn. ``system_prompt`` becomes the
conversation's system message, replacing the stored one when both exist.

Refused with a 400 naming the field: image items (the models Sidelight runs read text
only), unknown item types, ``reasoning`` other than ``off`` for a model that does not
reason, and a ``context_length`` beyond what the model holds. A smaller ``context_length``
is served as asked: Sidelight keeps the model's full context loaded, which holds it.

Pure functions of the request: safe on any thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.echo import clip
from engine.models import GENERATIVE_TASKS
from engine.server.errors import APIError
from engine.server.images import ImageList, image_from_url
from engine.server.lmstudio_v1 import protocol
from engine.server.model_info import ModelInfo
from engine.server.pipeline import GenerateRequest
from engine.server.sampling import sampling_params

_TEXT_ITEMS = frozenset({"message", "text"})
# Efforts a chat template may read (gpt-oss does); any of them switches thinking on.
_EFFORTS = frozenset({"low", "medium", "high"})


@dataclass(frozen=True)
class Turn:
    """The pipeline request, and the conversation it sends (kept with the reply)."""

    request: GenerateRequest
    messages: list[dict[str, Any]]


def refuse(param: str, message: str) -> APIError:
    return APIError(400, f"{param}: {message}", param=param, code="invalid_request")


def chat_turn(
    body: protocol.ChatRequest, history: list[dict[str, Any]] | None, info: ModelInfo | None
) -> Turn:
    """The turn for ``body``, continuing ``history`` (a stored conversation) if given.

    ``info`` describes the model asked for (``None`` when unknown: the pipeline answers
    that with its 404).

    Raises:
        APIError: 400 naming the item or field that cannot be served.
    """
    # A stored conversation keeps its text; its images are not kept (only this turn's go).
    messages = [{k: v for k, v in m.items() if k != "images"} for m in history or []]
    if body.system_prompt is not None:
        messages = [m for m in messages if m["role"] != "system"]
        if body.system_prompt:
            messages.insert(0, {"role": "system", "content": body.system_prompt})
    images = ImageList()
    text, indices = _user_input(body.input, images)
    user: dict[str, Any] = {"role": "user", "content": text}
    if indices:
        user["images"] = indices
    messages.append(user)
    _check_model_fields(body, info)
    effort = body.reasoning
    request = GenerateRequest(
        model=body.model,
        dialect="lmstudio",
        messages=messages,
        max_tokens=body.max_output_tokens,
        sampling=sampling_params(
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=body.top_k,
            min_p=body.min_p,
            repetition_penalty=body.repeat_penalty,
        ),
        thinking=None if effort is None else effort != "off",
        chat_template_kwargs={"reasoning_effort": effort} if effort in _EFFORTS else {},
        split_reasoning=True,  # a leading <think> block is a reasoning output item
        images=images.all(),
    )
    return Turn(request, messages)


def _user_input(items: list[protocol.InputItem], images: ImageList) -> tuple[str, list[int]]:
    """The user turn's text, and the indices of its image items (added to ``images``)."""
    texts = []
    indices = []
    for i, item in enumerate(items):
        if item.type in _TEXT_ITEMS:
            if not isinstance(item.content, str):
                raise refuse(f"input.{i}.content", "must be a string")
            texts.append(item.content)
        elif item.type == "image":
            if not isinstance(item.data_url, str):
                raise refuse(f"input.{i}.data_url", "an image item needs data_url (a data URL)")
            indices.append(images.add(image_from_url(item.data_url, f"input.{i}.data_url")))
        else:
            raise refuse(
                f"input.{i}.type",
                f"'{clip(item.type)}' items are not supported; send text and image items",
            )
    return "\n".join(texts), indices


def _check_model_fields(body: protocol.ChatRequest, info: ModelInfo | None) -> None:
    if info is None:
        return
    generative = info.task in GENERATIVE_TASKS
    if body.reasoning not in (None, "off") and generative and not info.reasoning:
        raise refuse(
            "reasoning",
            f"'{info.id}' is not a reasoning model; send 'off' or leave reasoning out",
        )
    limit = info.context_length
    if body.context_length is not None and limit and body.context_length > limit:
        raise refuse("context_length", f"'{info.id}' holds at most {limit} tokens of context")
