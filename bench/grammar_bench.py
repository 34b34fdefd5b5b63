"""Where XGrammar's compile cost grows: schema shapes timed on the tiny demo model.

Each case builds the grammar the worker would build for a request (the compact JSON grammar
of ``engine/worker/json_grammar.py``, or XGrammar's own ``json_schema`` converter where the
schema falls outside that subset; tool grammars as ``tool_choice: "required"`` builds them)
and times one compile on a throwaway ``ContinuousBatchingPipeline`` over the demo model, in
this process (a step holds the GIL, so nothing else here runs meanwhile). The figures set
the limits in ``engine/server/grammar_limits.py``; the table also prints the cost the server
charges a schema (its ``grammar_cost``), so a row reads "this many units took this long".

A series stops after the first case slower than ``--cap`` seconds (the next would be
slower still). Run: ``python -m bench.grammar_bench`` (``--quick`` for the small sizes only,
``--only limits`` for one series).

The compile grows with the vocabulary too: ``--model DIR`` compiles over that model's
tokenizer instead (e.g. the Qwen2.5-shaped bench model, 151,646 tokens), and the *captured
agent tools* series compiles the tool sets the recorded agents send (``tool_choice:
"auto"``'s lazy grammar, Hermes syntax) as the worker writes them and, beside each, as
XGrammar's own JSON schema of the whole set (what the worker fell back to before bounds and
patterns were written)::

    python -m bench.grammar_bench --only captured --model CACHE/models/qwen2.5-0.5b-shape-random/ov-int4
The latest figures live in docs/benchmarks.md ("Grammar compile").
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.agent_sessions import load_bodies
from engine.parsing import CALL_SYNTAX, ToolFormat, call_schema, tool_format_for_template
from engine.server.grammar_limits import GrammarSize, measure_grammar
from engine.worker.grammar_probe import compile_once, probe_pipeline
from engine.worker.messages import OutputConstraint
from engine.worker.prepare import structured_config

logger = logging.getLogger("bench.grammar")


@dataclass(frozen=True)
class Case:
    series: str
    size: str
    schema: dict[str, Any]
    tools: bool = False  # a tool_choice "required" grammar over schema["anyOf"]-style tools
    raw_json_schema: bool = False  # XGrammar's own converter (free whitespace)
    lazy: bool = False  # tool_choice "auto": free text until the call's trigger


def _object(count: int, required: bool, kind: str = "string") -> dict[str, Any]:
    properties = {f"field_{i}": {"type": kind} for i in range(count)}
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(properties)
    return schema


def _nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": {"leaf": {"type": "string"}}}
    for level in range(depth):
        schema = {
            "type": "object",
            "properties": {"name": {"type": "string"}, f"child_{level}": schema},
        }
    return schema


def _tools(count: int, properties: int) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": f"tool_{t}",
                "description": "a tool",
                "parameters": _object(properties, required=False),
            },
        }
        for t in range(count)
    ]


def cases(quick: bool) -> Iterator[Case]:
    small = quick
    for n in (50, 100, 200) if small else (50, 100, 200, 300, 500, 700, 1000):
        yield Case("optional properties (one object)", str(n), _object(n, required=False))
    for n in (100, 300) if small else (100, 300, 1000, 3000):
        yield Case("required properties (one object)", str(n), _object(n, required=True))
    for n in (100, 300) if small else (300, 1000, 3000):
        yield Case(
            "optional properties, XGrammar json_schema",
            str(n),
            _object(n, required=False),
            raw_json_schema=True,
        )
    for t, p in (
        ((8, 15), (16, 15)) if small else ((8, 15), (16, 15), (32, 15), (64, 15), (128, 15))
    ):
        yield Case("tools x optional properties", f"{t} x {p}", {"tools": _tools(t, p)}, tools=True)
    for t, p in ((16, 4),) if small else ((16, 4), (64, 4), (128, 4), (32, 30)):
        yield Case("tools x optional properties", f"{t} x {p}", {"tools": _tools(t, p)}, tools=True)
    for d in (4, 8) if small else (4, 8, 15):
        yield Case("nesting (objects in objects)", str(d), _nested(d))
    for n in (100, 1000) if small else (100, 1000, 3000, 9000):
        values = [f"value-{i}" for i in range(n)]
        yield Case("enum values (one string)", str(n), {"enum": values})
    for chars in (10_000, 100_000) if small else (10_000, 100_000, 1_000_000):
        yield Case("one long enum value (characters)", f"{chars:,}", {"enum": ["x" * chars]})
    # The largest grammars the server's limits allow (engine/server/grammar_limits.py).
    yield Case("at the limits", "128 optional", _object(128, required=False))
    many = {"type": "object", "properties": {f"o{k}": _object(127, False) for k in range(4)}}
    many["required"] = list(many["properties"])
    yield Case("at the limits", "4 objects x 127 optional", many)
    yield Case("at the limits", "512 required", _object(512, required=True))
    yield Case("at the limits", "32 tools x 16", {"tools": _tools(32, 16)}, tools=True)
    yield Case("at the limits", "4 tools x 128", {"tools": _tools(4, 128)}, tools=True)
    yield Case("at the limits", "2,048 enum values", {"enum": [f"v{i}" for i in range(2048)]})
    for name, tools in _captured_tool_sets():
        for raw in (False, True):
            size = f"{name} ({len(tools)} tools){', XGrammar json_schema' if raw else ''}"
            yield Case("captured agent tools", size, {"tools": tools}, True, raw, lazy=True)


# The recorded requests whose tool sets the series compiles (capture file, request name).
CAPTURED = (
    ("claude_code.json", "default"),
    ("claude_code_tool_search.json", "loaded"),
    ("codex.json", "default"),
)


def _captured_tool_sets() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Each capture's tools as OpenAI function tools (Anthropic's ``input_schema`` and the
    Responses API's flat form alike; tools that are not functions are left out)."""
    for file, request in CAPTURED:
        for body in load_bodies(file, (request,)):
            tools = []
            for tool in body.get("tools") or []:
                function = tool.get("function") or tool
                schema = function.get("input_schema") or function.get("parameters")
                if isinstance(schema, dict) and function.get("name"):
                    tools.append(
                        {
                            "type": "function",
                            "function": {"name": function["name"], "parameters": schema},
                        }
                    )
            yield f"{file.removesuffix('.json')} {request}", tools


def _constraint(case: Case, fmt: ToolFormat) -> OutputConstraint:
    """The constraint the planner would send for ``case`` (tools: ``tool_choice`` required)."""
    if case.tools:
        syntax = CALL_SYNTAX[fmt]
        schema = call_schema(fmt, case.schema["tools"])
        trigger = syntax.begin.strip() if case.lazy else ""
        return OutputConstraint(json.dumps(schema), syntax.begin, syntax.end, "tools", trigger)
    return OutputConstraint(json.dumps(case.schema))


def measure(case: Case, pipe: Any, fmt: ToolFormat) -> tuple[float, str | None, int, GrammarSize]:
    """Seconds one compile took, its error (None: compiled), grammar bytes, server count."""
    import openvino_genai as ov_genai

    constraint = _constraint(case, fmt)
    if case.raw_json_schema:
        structured = ov_genai.StructuredOutputConfig(json_schema=constraint.json_schema)
        size = len(constraint.json_schema)
    else:
        grammar = structured_config(constraint)
        structured, size = grammar.config, grammar.size
    if case.tools:
        counted = measure_grammar(t["function"]["parameters"] for t in case.schema["tools"])
    else:
        counted = measure_grammar([case.schema])
    started = time.perf_counter()
    error = compile_once(pipe, structured)
    return time.perf_counter() - started, error, size, counted


def run(
    quick: bool, cap: float, out: Callable[[str], None], only: str = "", model: Path | None = None
) -> None:
    from engine.resources import demo_model_path

    folder = model or demo_model_path()
    tokenizer_template = (demo_model_path() / "tokenizer_config.json").read_text("utf-8")
    fmt = tool_format_for_template(json.loads(tokenizer_template).get("chat_template"))
    if fmt not in CALL_SYNTAX:  # an XML or harmony family: no JSON call grammar to measure
        fmt = ToolFormat.HERMES
    pipe = probe_pipeline(folder)
    compile_once(pipe, structured_config(OutputConstraint('{"type": "string"}')).config)  # warm
    out(
        "| series | size | grammar bytes | properties | most optional | alternatives "
        "| compile s | result |"
    )
    out("|---|---:|---:|---:|---:|---:|---:|---|")
    stopped: set[str] = set()
    for case in cases(quick):
        if case.series in stopped or only not in case.series:
            continue
        seconds, error, size, n = measure(case, pipe, fmt)
        if error is not None:
            pipe = probe_pipeline(folder)  # a failed step leaves it unusable
        result = "ok" if error is None else f"error: {error[:60]}"
        out(
            f"| {case.series} | {case.size} | {size:,} | {n.properties:,} | {n.most_optional:,} "
            f"| {n.alternatives:,} | {seconds:.2f} | {result} |"
        )
        if seconds > cap:
            stopped.add(case.series)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--cap", type=float, default=20.0, help="stop a series past this")
    parser.add_argument("--only", default="", help="the series whose name holds this")
    parser.add_argument("--model", type=Path, help="compile over this IR's vocabulary")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    run(args.quick, args.cap, lambda line: print(line, flush=True), args.only, args.model)


if __name__ == "__main__":
    main()
