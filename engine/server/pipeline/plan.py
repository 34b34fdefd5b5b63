"""How one request is generated and parsed: tool syntax, decoding constraint, reply parser.

The tool-call syntax comes from the loaded model's chat template. ``tool_choice``
``required`` (or a named function) constrains decoding to one call in that syntax,
``"auto"`` constrains each call once the model opens one (a lazy grammar), and a
``response_schema`` constrains it to matching JSON (GenAI structured output), so the JSON is
valid against its schema whatever the model.
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from engine.parsing import (
    ContentDelta,
    ReasoningFormat,
    ReplyEvent,
    ReplyParser,
    ToolFormat,
    call_schema,
    call_syntax,
    reasoning_format_for_template,
    template_supports_reasoning,
    tool_format_for_template,
)
from engine.parsing.tool_parsers import json_lists, mistral
from engine.parsing.tool_parsers.constrain import CALL_GRAMMARS, family_grammar
from engine.parsing.tool_parsers.grammar import (
    GAP,
    THINK_OPENED,
    CallGrammar,
    Json,
    Seq,
    Tag,
    Unconstrained,
    functions_of,
)
from engine.server.errors import APIError
from engine.server.grammar_limits import GrammarTooLarge, check_grammar
from engine.server.pipeline.request import GenerateRequest
from engine.worker.messages import GenerationRequest, ImageInput, OutputConstraint

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    """What the engine is asked for, and how its text is read back."""

    tool_format: ToolFormat | None  # parse tool calls in this syntax (None: tools not in play)
    constraint: OutputConstraint | None
    max_calls: int | None  # keep at most this many calls (None: all)
    split_reasoning: bool
    reasoning_format: ReasoningFormat = ReasoningFormat.THINK
    # The request's tools (their schemas type XML-style parameter values); () without tools.
    tools: tuple[dict[str, Any], ...] = field(default=())


def plan_request(request: GenerateRequest, chat_template: str | None) -> Plan:
    """Choose the tool syntax, any decoding constraint and the reply parsing for ``request``.

    Raises:
        APIError: 400 when ``tool_choice`` names a function no tool has, or when the
            grammar of the constraint is over a limit of ``engine/server/grammar_limits.py``
            (naming ``tools`` or the schema's field: its compile would stall the model).
    """
    split = request.split_reasoning
    if split is None:
        split = template_supports_reasoning(chat_template)
    choice = request.tool_choice
    calls_tools = bool(request.tools) and choice.mode != "none"
    fmt = tool_format_for_template(chat_template) if calls_tools else None
    max_calls = None if request.parallel_tool_calls else 1
    reasoning = reasoning_format_for_template(chat_template)
    tools = tuple(request.tools) if calls_tools else ()
    forced = choice.mode == "required" or choice.name is not None
    args_form = fmt is ToolFormat.MISTRAL and mistral.writes_args(chat_template or "")
    syntax = call_syntax(fmt) if fmt is not None and forced and not args_form else None
    if fmt is not None and forced and syntax is None:
        calls = 1 if choice.name else max_calls
        constraint = _family_forced(fmt, request.tools, choice.name, calls == 1, args_form)
        return Plan(fmt, constraint, calls, split, reasoning, tools)
    if fmt is not None and syntax is not None:
        try:
            schema = call_schema(fmt, request.tools, choice.name)
        except ValueError as exc:  # a dialect let a name through that no tool has
            raise APIError(400, f"tool_choice: {exc}", param="tool_choice") from exc
        _check_grammar(_parameters(request.tools, choice.name), "tools")
        schema_text = json.dumps(schema)
        constraint = OutputConstraint(
            schema_text,
            syntax.begin,
            syntax.end,
            "tools",
            after_open=Seq((THINK_OPENED, GAP, Tag(syntax.begin, Json(schema_text), syntax.end))),
        )
        return Plan(fmt, constraint, 1 if choice.name else max_calls, split, reasoning, tools)
    if request.response_schema is None:
        lazy = _lazy_calls(fmt, request.tools, max_calls, args_form) if fmt is not None else None
        return Plan(fmt, lazy, max_calls, split, reasoning, tools)
    _check_grammar([request.response_schema], request.schema_param)
    schema_text = json.dumps(request.response_schema)
    constraint = OutputConstraint(schema_text, param=request.schema_param)
    return Plan(fmt, constraint, max_calls, split, reasoning, tools)


def _lazy_calls(
    fmt: ToolFormat, tools: list[dict[str, Any]], max_calls: int | None, args_form: bool = False
) -> OutputConstraint | None:
    """``tool_choice: "auto"``: once the model opens a call, the call must be well formed.

    Free text until the family's trigger (``<tool_call>``), then the call's JSON is held to
    the tools' schemas (a lazy grammar, see :class:`OutputConstraint`), so an agent gets a
    structured call instead of a slipped one: the families with their own call grammar
    (:data:`CALL_GRAMMARS`), the JSON-list families (Nemotron, Granite: the whole list is
    held) and those whose call is one JSON object after a marker (:data:`LAZY_FORMATS`); a
    grammar over the server's limits is left out (logged), never refused: the client asked
    for no constraint.
    """
    if fmt in CALL_GRAMMARS or args_form:
        return _family_lazy(fmt, tools, max_calls == 1, args_form)
    if fmt in json_lists.LIST_TAGS:
        return _list_lazy(fmt, tools, max_calls == 1)
    syntax = call_syntax(fmt) if fmt in LAZY_FORMATS else None
    if syntax is None:
        return None
    try:
        schema = call_schema(fmt, tools)
        check_grammar(_parameters(tools, None))
    except (ValueError, GrammarTooLarge) as exc:
        logger.info("tool calls unconstrained: %s", exc)
        return None
    trigger = syntax.begin.strip()
    return OutputConstraint(
        json.dumps(schema), syntax.begin, syntax.end, "tools", trigger, single=max_calls == 1
    )


# Calls written as one JSON object after a marker that starts nothing else: the lazy
# grammar's trigger. Lists are not (Nemotron's and Granite's have their own lazy grammar,
# json_lists.lazy_grammar; Mistral's is in its family grammar), nor Llama 3's bare JSON,
# nor AUTO (a template showing no syntax): Qwen3-Coder writes XML inside the same
# <tool_call>, which a JSON grammar would corrupt. The families with their own call
# grammar (CALL_GRAMMARS: harmony, DeepSeek, DeepSeek V3.2 DSML, Kimi K2, GLM, Gemma 4,
# Qwen3-Coder XML, Seed-OSS, MiniMax-M2) are lazy on their own trigger; GenAI's
# QwenXMLParametersFormat, tried before for the XML family, corrupted calls and is not
# used (qwen3_xml.call_grammar writes the elements).
LAZY_FORMATS = frozenset({ToolFormat.HERMES})


def _family_forced(
    fmt: ToolFormat,
    tools: list[dict[str, Any]],
    name: str | None,
    single: bool,
    args_form: bool = False,
) -> OutputConstraint | None:
    """A forced call in the family's own syntax (its module's ``call_grammar``), or ``None``
    with the typed reason logged: the call is then parsed, not constrained. ``args_form``:
    a Mistral template of the ``[TOOL_CALLS]name[ARGS]`` form (:func:`_call_grammar`)."""
    try:
        grammar = _call_grammar(fmt, tools, name, single, args_form)
    except ValueError as exc:  # a dialect let a name through that no tool has
        raise APIError(400, f"tool_choice: {exc}", param="tool_choice") from exc
    if isinstance(grammar, Unconstrained):
        logger.warning(
            "tool_choice forces a call, but %s calls are not constrained (%s)", fmt, grammar
        )
        return None
    _check_grammar(_parameters(tools, name), "tools")
    schemas = json.dumps(_parameters(tools, name))
    opened = grammar.forced(single, opened=True) if grammar.opened is not None else None
    return OutputConstraint(
        schemas, param="tools", structure=grammar.forced(single), after_open=opened
    )


def _call_grammar(
    fmt: ToolFormat,
    tools: list[dict[str, Any]],
    name: str | None,
    single: bool,
    args_form: bool,
) -> CallGrammar | Unconstrained:
    """The family's call grammar; for a Mistral template that writes ``name[ARGS]{...}``
    (Ministral 3, Devstral, Mistral Small 3.2) that form's, not the JSON array
    (:data:`CALL_SYNTAX`'s v3 form), which such a model was never taught and, forced on
    it, runs off into garbage.

    Raises:
        ValueError: ``name`` is no tool's name (or there are no tools).
    """
    builder = mistral.call_grammar if args_form else None
    return family_grammar(fmt, tools, name, single, builder)


def _family_lazy(
    fmt: ToolFormat, tools: list[dict[str, Any]], single: bool, args_form: bool = False
) -> OutputConstraint | None:
    """``tool_choice: "auto"`` in a family's own syntax: free text until its trigger."""
    try:
        grammar = _call_grammar(fmt, tools, None, single, args_form)
        check_grammar(_parameters(tools, None))
    except (ValueError, GrammarTooLarge) as exc:
        logger.info("tool calls unconstrained: %s", exc)
        return None
    lazy = grammar.lazy(single) if isinstance(grammar, CallGrammar) else None
    if lazy is None:
        logger.info("tool calls unconstrained: %s has no lazy grammar (%s)", fmt, grammar)
        return None
    schemas = json.dumps(_parameters(tools, None))
    return OutputConstraint(
        schemas, param="tools", trigger=lazy.triggers[0], single=single, structure=lazy
    )


def _list_lazy(
    fmt: ToolFormat, tools: list[dict[str, Any]], single: bool
) -> OutputConstraint | None:
    """``tool_choice: "auto"`` for a JSON-list family (Nemotron Nano v2, Granite 3.x): free
    text until its marker, then the list held to the tools' schemas."""
    try:
        check_grammar(_parameters(tools, None))
    except GrammarTooLarge as exc:
        logger.info("tool calls unconstrained: %s", exc)
        return None
    functions = functions_of(tools)
    if not functions:
        return None
    lazy = json_lists.lazy_grammar(fmt, functions, single)
    schemas = json.dumps(_parameters(tools, None))
    return OutputConstraint(
        schemas, param="tools", trigger=lazy.triggers[0], single=single, structure=lazy
    )


def _parameters(tools: list[dict[str, Any]], name: str | None) -> list[Any]:
    """The parameter schemas of the tools a call grammar covers (only ``name``'s, if set)."""
    functions = [tool.get("function") or {} for tool in tools]
    return [f.get("parameters") for f in functions if name is None or f.get("name") == name]


def _check_grammar(schemas: list[Any], param: str) -> None:
    try:
        check_grammar(schemas)
    except GrammarTooLarge as exc:
        raise APIError(
            400,
            f"{param}: the schema is too large to enforce as a grammar: {exc}",
            param=param,
            code="grammar_too_large",
        ) from exc


def engine_request(
    request: GenerateRequest, plan: Plan, images: tuple[ImageInput, ...] = ()
) -> GenerationRequest:
    """The worker's request: ``thinking`` becomes the templates' ``enable_thinking`` (an
    explicit ``chat_template_kwargs`` entry wins); tools go in only when they are in play;
    ``images`` are the request's images, decoded (engine.server.images)."""
    kwargs = dict(request.chat_template_kwargs)
    if request.messages is not None and request.thinking is not None:
        kwargs.setdefault("enable_thinking", request.thinking)
    return GenerationRequest(
        messages=template_messages(request.messages),
        prompt=request.prompt,
        suffix=request.suffix,
        max_tokens=request.max_tokens,
        context_limit=request.context_limit,
        stop=request.stop,
        sampling=request.sampling,
        chat_template_kwargs=kwargs,
        tools=request.tools[: request.listed_tools] if plan.tool_format else None,
        constraint=plan.constraint,
        logprobs=request.logprobs,
        count_only=request.count_only,
        keep_alive=request.keep_alive,
        images=images,
    )


def template_messages(messages: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """``messages`` with tool-call arguments as objects, as chat templates expect them.

    Dialects carry arguments as the client sent them: a JSON string (OpenAI, Responses) or
    an object (Anthropic's ``tool_use.input``). A template that writes ``arguments | tojson``
    would quote a string a second time, so every string that parses becomes its object here,
    once for all dialects; one that does not parse is left as text for the template to show.
    """
    if messages is None:
        return None
    return [_with_object_arguments(m) if m.get("tool_calls") else m for m in messages]


def _with_object_arguments(message: dict[str, Any]) -> dict[str, Any]:
    calls = []
    for call in message["tool_calls"]:
        function = call.get("function", {})
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(json.JSONDecodeError):
                arguments = json.loads(arguments) if arguments.strip() else {}
        calls.append({**call, "function": {**function, "arguments": arguments}})
    return {**message, "tool_calls": calls}


class ReplyReader:
    """The engine's text as reply events, per :class:`Plan`.

    Without tools and reasoning to split the text passes through as written (a parser would
    hold back a leading space or ``<`` until it knows more). Not thread-safe: one per request.
    """

    def __init__(self, plan: Plan, opens_reasoning: bool) -> None:
        self._parser: ReplyParser | None = None
        # Harmony replies are always read: their channel headers are never content.
        harmony = plan.reasoning_format is ReasoningFormat.HARMONY
        if plan.tool_format is not None or plan.split_reasoning or harmony:
            self._parser = ReplyParser(
                tool_format=plan.tool_format,
                starts_in_reasoning=opens_reasoning and plan.split_reasoning,
                max_calls=plan.max_calls,
                reasoning_format=plan.reasoning_format,
                tools=plan.tools or None,
            )

    @property
    def called(self) -> bool:
        """Whether the reply made a tool call so far."""
        return self._parser is not None and bool(self._parser.calls)

    def feed(self, text: str) -> list[ReplyEvent]:
        if self._parser is None:
            return [ContentDelta(text)]
        return self._parser.feed(text)

    def finish(self, text: str) -> list[ReplyEvent]:
        """The last text, and everything held back."""
        if self._parser is None:
            return [ContentDelta(text)] if text else []
        return self._parser.feed(text) + self._parser.finish()
