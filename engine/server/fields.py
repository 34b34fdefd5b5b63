"""Limits, field types and schema checks shared by every API dialect's request models.

Numbers in a request end up in C++ (OpenVINO GenAI's ``GenerationConfig``: ``size_t`` token
counts, ``top_k`` and seed, ``float`` temperatures and penalties), so each field type says
what that type holds and a value outside it is a 400 naming the field, never a worker crash.
Schemas (tools, ``response_format``, Ollama's ``format``) must be JSON Schema objects of
known types (:func:`check_schema`) and are bounded in depth and size
(:func:`check_schema_size`): the chat template and XGrammar walk them recursively in the
engine.
"""

from __future__ import annotations

import math
import re
import struct
import warnings
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

from engine.echo import clip

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1
FLOAT32_MAX = 3.4028234663852886e38

MAX_STOP_SEQUENCES = 16
MAX_EMBEDDING_INPUTS = 2048  # as OpenAI's /v1/embeddings
MAX_RERANK_DOCUMENTS = 1024  # a retriever's candidates; each is a forward pass of its own
MAX_TOOLS = 128  # as OpenAI's chat completions
MAX_SCHEMA_DEPTH = 32  # JSON levels inside one schema (an object property is two)
MAX_SCHEMA_NODES = 10_000  # values inside one schema


def _float32(value: float) -> float:
    """``value`` unchanged, if a C++ ``float`` holds it (finite, and not rounded to zero)."""
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    try:
        rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        raise ValueError(f"must be at most {FLOAT32_MAX:.4g} in magnitude") from None
    if value != 0 and rounded == 0:
        raise ValueError("is too close to zero to be used")
    return value


def _not_bool(value: Any) -> Any:
    """Refuse JSON ``true``/``false`` where a number stands (pydantic reads them as 1 and 0)."""
    if isinstance(value, bool):
        raise ValueError(f"must be a number, not {str(value).lower()}")
    return value


# Every number field of every dialect is one of these, never a bare int or float: pydantic's
# lax mode reads ``true`` as 1, so ``max_output_tokens: true`` would be a 1-token answer.
NotBool = BeforeValidator(_not_bool)
Int = Annotated[int, NotBool]
Float = Annotated[float, NotBool]
# A number the engine keeps in a C++ float.
Float32 = Annotated[float, NotBool, AfterValidator(_float32)]
# A count or size the engine keeps in a 64-bit integer.
Int64 = Annotated[int, NotBool, Field(ge=INT64_MIN, le=INT64_MAX)]
# A seed: negative means "random"; the engine's seed is a size_t, so at most 2**64 - 1.
Seed = Annotated[int, NotBool, Field(ge=INT64_MIN, le=UINT64_MAX)]


def float32(value: float) -> float:
    """``value`` as the engine's C++ float will hold it (for comparisons near a bound)."""
    rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return rounded


def check_schema_size(schema: Any) -> None:
    """Refuse a schema deeper than :data:`MAX_SCHEMA_DEPTH` or larger than the node limit.

    Iterative, so it is safe on any input the JSON parser accepted.

    Raises:
        ValueError: the schema is too deep or too large (the message says which).
    """
    stack: list[tuple[Any, int]] = [(schema, 1)]
    nodes = 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > MAX_SCHEMA_NODES:
            raise ValueError(f"the schema has more than {MAX_SCHEMA_NODES} values")
        children = (
            value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        )
        for child in children:
            if depth >= MAX_SCHEMA_DEPTH and isinstance(child, dict | list):
                raise ValueError(f"the schema is nested deeper than {MAX_SCHEMA_DEPTH} levels")
            stack.append((child, depth + 1))


_SCHEMA_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}


def check_schema(schema: Any, path: str = "schema") -> None:
    """Reject schemas that are not JSON Schema objects (GenAI checks the rest)."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise ValueError(f"{path} must be a JSON Schema object")
    kinds = schema.get("type")
    for kind in kinds if isinstance(kinds, list) else [kinds] if kinds is not None else []:
        if not isinstance(kind, str) or kind not in _SCHEMA_TYPES:
            raise ValueError(f"{path}.type: unknown JSON Schema type {clip(str(kind))!r}")
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise ValueError(f"{path}.properties must be an object")
    for key, value in properties.items():
        check_schema(value, f"{path}.properties.{clip(str(key))}")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise ValueError(f"{path}.required must be a list of property names")
    if "items" in schema:
        check_schema(schema["items"], f"{path}.items")
    pattern = schema.get("pattern")
    if pattern is not None:
        # XGrammar accepts a bad pattern at submit time and fails inside the engine step.
        try:
            with warnings.catch_warnings():  # "possible nested set" and the like
                warnings.simplefilter("ignore")
                re.compile(str(pattern))
        except (re.error, RecursionError, OverflowError) as exc:
            raise ValueError(f"{path}.pattern is not a valid regular expression: {exc}") from exc
