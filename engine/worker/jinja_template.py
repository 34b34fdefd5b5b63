"""Render a chat template the way transformers does, for templates GenAI's renderer cannot.

Why: GenAI 2026.4 renders chat templates with its own Jinja subset (minja). Some templates
on the hub use what it lacks: GLM-4.6 fails on every request ("Expected comma in tuple", a
conditional expression inside a call), GLM-4.7-Flash and MiniMax-M2 whenever tools are sent
(``tojson(ensure_ascii=False)``). transformers renders all three with Jinja2 in a sandbox,
with a few filters and globals of its own; so does this module, with the same ones:

- ``ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)`` with the
  ``loopcontrols`` extension and transformers' ``{% generation %}`` block (rendered as is);
- the ``tojson`` filter with ``ensure_ascii`` (default False), ``indent``, ``separators``
  and ``sort_keys``;
- the ``raise_exception(message)`` and ``strftime_now(format)`` globals;
- the special tokens (``bos_token``, ``eos_token``, ``pad_token``) and the caller's extra
  context (``enable_thinking`` ...) as variables.

The worker uses it only after GenAI refused a template (:func:`render_chat`), or where GenAI
rewrote the history's tool calls as JSON although the template writes them in its own
markup (:func:`genai_rewrote_calls`: Ministral 3's template, whose ``[TOOL_CALLS]name[ARGS]``
and ``[TOOL_RESULTS]`` GenAI's capability probe misses, so a model that was taught its own
markup would see ``{"tool_calls": [...]}`` in its history), and logs once per template which
renderer it took. The sandbox keeps a template from reaching Python
internals; Jinja's own sandbox caps ``range`` at 100,000 items.

Threading: compiled templates are cached per template text under a lock; rendering is
thread-safe.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from datetime import datetime
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

logger = logging.getLogger(__name__)

_CACHE_SIZE = 8


class TemplateRefused(ValueError):
    """The template raised (``raise_exception``) or could not render these messages."""


class _Generation(Extension):
    """transformers' ``{% generation %}...{% endgeneration %}``: it marks the assistant's
    tokens for training masks; rendering keeps the body as it is."""

    tags = {"generation"}  # noqa: RUF012 (jinja2 reads it from the class)

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise(message: str) -> None:
    raise TemplateRefused(str(message))


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = _strftime_now
    return env


_ENV = _environment()
_LOCK = threading.Lock()
_COMPILED: OrderedDict[str, jinja2.Template] = OrderedDict()
_LOGGED: set[str] = set()


def _compiled(template: str) -> jinja2.Template:
    key = hashlib.sha256(template.encode("utf-8", "surrogatepass")).hexdigest()
    with _LOCK:
        found = _COMPILED.get(key)
        if found is not None:
            _COMPILED.move_to_end(key)
            return found
    compiled = _ENV.from_string(template)  # raises TemplateSyntaxError
    with _LOCK:
        _COMPILED[key] = compiled
        while len(_COMPILED) > _CACHE_SIZE:
            _COMPILED.popitem(last=False)
    return compiled


def render_template(
    template: str,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    special_tokens: dict[str, str] | None = None,
    extra_context: dict[str, Any] | None = None,
) -> str:
    """``template`` rendered for ``messages`` as transformers' ``apply_chat_template`` does.

    Raises:
        TemplateRefused: the template raised for these messages, or does not compile or
            render (the message says why).
    """
    context: dict[str, Any] = {**(special_tokens or {}), **(extra_context or {})}
    context.update(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt)
    try:
        return str(_compiled(template).render(**context))
    except TemplateRefused:
        raise
    except jinja2.TemplateError as exc:
        raise TemplateRefused(f"{type(exc).__name__}: {exc}") from exc
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        raise TemplateRefused(f"{type(exc).__name__}: {exc}") from exc


# What GenAI writes in place of a template's own call markup when its capability probe finds
# none (minja's polyfills): the calls and the tool results as JSON objects.
_POLYFILLS = ('"tool_calls": [', '"tool_response": {')


def genai_rewrote_calls(text: str, template: str) -> bool:
    """Whether GenAI's rendering ``text`` holds its JSON stand-in for the history's calls or
    results although ``template`` renders ``tool_calls`` itself (the stand-in's text is not
    the template's): then the template, rendered as transformers does, is what the model was
    taught."""
    if "tool_calls" not in template:
        return False
    return any(marker in text and marker not in template for marker in _POLYFILLS)


def render_chat(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None,
    extra_context: dict[str, Any] | None,
    genai_error: Exception | None = None,
) -> str:
    """The tokenizer's chat template rendered here, after GenAI's renderer refused it with
    ``genai_error``, or (``None``) rewrote its calls (:func:`genai_rewrote_calls`); logged
    once per template, with which renderer now serves it.

    Raises:
        TemplateRefused: as :func:`render_template`.
    """
    template = str(tokenizer.chat_template or "")
    if not template:
        raise TemplateRefused("the model has no chat template")
    special = {
        "bos_token": str(tokenizer.get_bos_token() or ""),
        "eos_token": str(tokenizer.get_eos_token() or ""),
        "pad_token": str(tokenizer.get_pad_token() or ""),
    }
    text = render_template(
        template, messages, tools=tools, special_tokens=special, extra_context=extra_context
    )
    key = hashlib.sha256(template.encode("utf-8", "surrogatepass")).hexdigest()
    with _LOCK:
        first = key not in _LOGGED
        _LOGGED.add(key)
    if first and genai_error is None:
        logger.info(
            "chat template rendered with Jinja2 (transformers' rules): GenAI's renderer "
            "wrote the history's tool calls as JSON, not in the template's own markup"
        )
    elif first:
        logger.info(
            "chat template rendered with Jinja2 (transformers' rules): GenAI's renderer "
            "refused it (%s)",
            str(genai_error).splitlines()[0][:200] if str(genai_error) else type(genai_error),
        )
    return text


def render_prompt(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None,
    extra_context: dict[str, Any] | None,
) -> str:
    """The generation prompt as the worker renders it: GenAI's renderer, or this module's
    where GenAI refuses the template or rewrites its calls (:func:`render_chat`).

    Raises:
        TemplateRefused: as :func:`render_template`.
    """
    try:
        text = str(
            tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tools=tools, extra_context=extra_context
            )
        )
    except Exception as exc:  # GenAI's renderer lacks some Jinja: transformers' rules
        return render_chat(
            tokenizer, messages, tools=tools, extra_context=extra_context, genai_error=exc
        )
    if genai_rewrote_calls(text, str(tokenizer.chat_template or "")):
        return render_chat(tokenizer, messages, tools=tools, extra_context=extra_context)
    return text
