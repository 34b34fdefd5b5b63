"""How large a grammar the server lets reach the engine: limits from measured compile times.

Every constrained request (``response_format`` json_schema / json_object, ``tool_choice``
``required`` or a named tool, Responses ``text.format``, Ollama ``format``, Anthropic
``tool_choice`` any/tool) becomes an XGrammar grammar that the engine worker compiles twice:
once on its grammar probe (a child process, off the step loop) and once inside the real
pipeline's ``step()``, where every other stream on that model waits for it. The compile time
grows superlinearly with a schema's optional properties and with its size
(``bench/grammar_bench.py``, docs/benchmarks.md "Grammar compile"): on the demo model a
1,000-property all-optional object took 21 s, 128 tools of 15 properties 4.6 s. These limits
keep the largest grammar allowed to about a second there (a repeat costs nothing: both
compilers cache by grammar), and are checked by the pipeline's
planner (:func:`engine.server.pipeline.plan.plan_request`), once for every dialect, before
the worker sees the request. The dialects' own checks (``fields.check_schema_size``: 32
levels, 10,000 values per schema) come first and bound the walk here.

Pure functions; safe on any thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# One object's properties that are not in its "required" list: the superlinear term
# (128 optional: 0.2-0.3 s, 200: 0.9 s, 300: 1.6 s, 500: 4.2 s, 1,000: 21 s on the demo model).
MAX_OPTIONAL_PROPERTIES = 128
# Properties in the whole grammar: every object's, every tool's parameters (512 required:
# 0.13 s; 32 tools x 16 optional: 0.4 s; 4 tools x 128 optional: 1.0 s; 4 objects x 127
# optional: 1.1 s; past it, 64 tools x 15: 1.2 s, 128 x 15: 4.6 s, 3,000 required: 2.4 s).
MAX_PROPERTIES = 512
# enum and const values and anyOf/oneOf branches in the whole grammar (cheap: 9,000 enum
# values 0.6 s; bounded so that alternatives cannot multiply the other terms).
MAX_ALTERNATIVES = 2048
# Characters of property names and literal values (enum, const) together (one 100,000-
# character enum value: 0.5 s; 1,000,000: 5.4 s).
MAX_LITERAL_CHARS = 120_000

# Keywords whose value is JSON data, not a schema: counted as literals, never walked.
_LITERALS = frozenset({"enum", "const"})
_DATA = frozenset({"default", "examples", "title", "description", "$comment"})


@dataclass(frozen=True)
class GrammarSize:
    """What a grammar's compile time depends on, counted over its schemas."""

    properties: int = 0
    most_optional: int = 0  # optional properties of the object that has the most
    alternatives: int = 0
    literal_chars: int = 0


class GrammarTooLarge(ValueError):
    """A grammar over a limit; the message names the measure and the limit."""


def measure_grammar(schemas: Iterable[Any]) -> GrammarSize:
    """Count ``schemas`` (one response schema, or each tool's parameters). Iterative."""
    properties = most_optional = alternatives = chars = 0
    stack: list[Any] = list(schemas)
    while stack:
        schema = stack.pop()
        if isinstance(schema, list):
            stack.extend(schema)
            continue
        if not isinstance(schema, dict):
            continue
        for key, value in schema.items():
            if key in _DATA:
                continue
            if key in _LITERALS:
                values = value if key == "enum" and isinstance(value, list) else [value]
                alternatives += len(values)
                chars += sum(len(str(v)) for v in values)
            elif key == "properties" and isinstance(value, dict):
                required = schema.get("required")
                needed = set(required) if isinstance(required, list) else set()
                optional = sum(1 for name in value if name not in needed)
                properties += len(value)
                most_optional = max(most_optional, optional)
                chars += sum(len(name) for name in value)
                stack.extend(value.values())
            elif key in ("anyOf", "oneOf") and isinstance(value, list):
                alternatives += len(value)
                stack.extend(value)
            elif isinstance(value, dict | list):
                stack.append(value)  # items, $defs, additionalProperties, allOf, ...
    return GrammarSize(properties, most_optional, alternatives, chars)


def check_grammar(schemas: Iterable[Any]) -> GrammarSize:
    """``schemas``' size, if a grammar over them is within every limit.

    Raises:
        GrammarTooLarge: the first limit passed, with the count and the limit.
    """
    size = measure_grammar(schemas)
    if size.most_optional > MAX_OPTIONAL_PROPERTIES:
        raise GrammarTooLarge(
            f"an object has {size.most_optional:,} optional properties; a grammar allows at "
            f"most {MAX_OPTIONAL_PROPERTIES} per object (list the others in 'required', or "
            "split the object)"
        )
    if size.properties > MAX_PROPERTIES:
        raise GrammarTooLarge(
            f"the grammar has {size.properties:,} properties; at most {MAX_PROPERTIES:,} "
            "(fewer tools or smaller schemas)"
        )
    if size.alternatives > MAX_ALTERNATIVES:
        raise GrammarTooLarge(
            f"the grammar has {size.alternatives:,} enum/const values and anyOf/oneOf "
            f"branches; at most {MAX_ALTERNATIVES:,}"
        )
    if size.literal_chars > MAX_LITERAL_CHARS:
        raise GrammarTooLarge(
            f"the grammar's property names and enum/const values hold "
            f"{size.literal_chars:,} characters; at most {MAX_LITERAL_CHARS:,}"
        )
    return size
