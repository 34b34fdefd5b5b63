"""Refuse a prompt far larger than its model's window before the worker tokenizes it.

Why: the worker templates and tokenizes every prompt on its step loop, and GenAI's
``Tokenizer.encode`` holds the GIL: a 15 MB message took 3 s to count on a quiet 2-core
machine (24-30 s on a loaded one) while every other stream on that model stood still, even
though the prompt could never fit the window. A prompt that uses more than
:data:`BYTES_PER_TOKEN` bytes of text for each token of the window is refused here, at the
cost of summing string lengths, so the worst prompt that reaches a worker is bounded by its
model's window: 256 KiB (the floor) for the demo model's 2,048 tokens, 1 MiB for a 32k model.

The bound is generous, not exact: text averages 3-5 bytes a token in every tokenizer we
serve (English, code, CJK, JSON); only long runs of one character (a 64-space indent is one
token in some vocabularies) average more, and a whole prompt of them is not a real one. The
refusal says what the limit is and why, and names the field.

Threading: pure functions, called on the event loop (summing lengths of even 16 MiB of text
takes milliseconds).
"""

from __future__ import annotations

from typing import Any

from engine.server.errors import APIError
from engine.server.pipeline.request import GenerateRequest

BYTES_PER_TOKEN = 32
# Not under a short window's template and tool schemas (a 512-token NPU model, say).
MIN_PROMPT_BYTES = 256 * 1024


def prompt_byte_limit(context_length: int | None) -> int | None:
    """The most text bytes a request may bring to a model with this window (None: no
    window known, only the body limit applies)."""
    if context_length is None or context_length <= 0:
        return None
    return max(MIN_PROMPT_BYTES, context_length * BYTES_PER_TOKEN)


def check_prompt_size(request: GenerateRequest, context_length: int | None) -> None:
    """Raise a 400 when ``request``'s text is over :func:`prompt_byte_limit`.

    Counted: every string in the messages (contents, tool calls and their arguments), the
    raw prompt and suffix, and the tool definitions, which the template writes into the
    prompt too. Counting stops as soon as the limit is passed.

    Raises:
        APIError: 400 ``context_length_exceeded`` naming the messages field in the
            dialect's words (``input`` for Responses).
    """
    limit = prompt_byte_limit(context_length)
    if limit is None:
        return
    parts: list[Any] = [request.messages, request.prompt, request.suffix, request.tools]
    size = _text_bytes(parts, limit)
    if size <= limit:
        return
    field = "prompt" if request.messages is None else "messages"
    param = request.field_names.get(field, field)
    what = "count" if request.count_only else "take"
    raise APIError(
        400,
        f"{param}: the prompt is over {limit:,} bytes of text, more than this model's "
        f"{context_length:,}-token context can hold (Sidelight does not {what} prompts over "
        f"{BYTES_PER_TOKEN} bytes for each token of the context). Please reduce the length "
        "of the messages.",
        param=param,
        code="context_length_exceeded",
    )


def _text_bytes(value: Any, limit: int) -> int:
    """UTF-8 bytes of every string in ``value`` (stops counting once over ``limit``)."""
    total = 0
    stack: list[Any] = [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, str):
            total += _utf8_len(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return total


def _utf8_len(text: str) -> int:
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: the worker refuses it by name later
        return len(text.encode("utf-8", "surrogatepass"))
