"""XML-style parameter values to JSON, typed by the tool's JSON schema.

Qwen3-Coder, Seed-OSS, GLM, MiniMax-M2 and DSML write each argument as text
(``<parameter=count>3</parameter>``); the client wants ``{"count": 3}``. The request's tool
schemas say which parameters are integers, numbers, booleans, objects or arrays; strings stay
strings. A parameter the schema does not type is kept as text unless it is a JSON object or
array (models write those as JSON). Pure functions; no threads.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from engine.parsing.tool_parsers.repair import Unrepairable, loads_lenient

logger = logging.getLogger(__name__)

ToolSchemas = Mapping[str, Mapping[str, Any]]
"""Each tool's parameters schema by function name (see :func:`tool_schemas`)."""


def tool_schemas(tools: Sequence[Mapping[str, Any]] | None) -> dict[str, Mapping[str, Any]]:
    """``{name: parameters schema}`` from OpenAI tool definitions (malformed ones skipped)."""
    schemas: dict[str, Mapping[str, Any]] = {}
    for tool in tools or ():
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            continue
        parameters = function.get("parameters")
        schemas[function["name"]] = parameters if isinstance(parameters, Mapping) else {}
    return schemas


def parameter_types(schemas: ToolSchemas | None, tool: str, parameter: str) -> set[str]:
    """The JSON types the schema allows for ``tool``'s ``parameter`` (empty: untyped)."""
    schema = (schemas or {}).get(tool) or {}
    properties = schema.get("properties")
    spec = properties.get(parameter) if isinstance(properties, Mapping) else None
    return _types(spec) if isinstance(spec, Mapping) else set()


def _types(spec: Mapping[str, Any]) -> set[str]:
    kind = spec.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {k for k in kind if isinstance(k, str)}
    found: set[str] = set()
    for key in ("anyOf", "oneOf"):
        for option in spec.get(key) or ():
            if isinstance(option, Mapping):
                found |= _types(option)
    enum = spec.get("enum")
    if not found and isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
        found = {"string"}
    return found


def typed_value(text: str, types: set[str]) -> tuple[Any, bool]:
    """``(value, repaired)``: ``text`` converted to the first of ``types`` it fits.

    Text that fits none of them stays a string (the client's validation names the field,
    which is better than a dropped call)."""
    if "string" in types and not types - {"string", "null"}:
        return text, False
    stripped = text.strip()
    for kind in ("integer", "number", "boolean", "null"):
        if kind in types:
            scalar = _scalar(stripped, kind)
            if scalar is not _NO:
                return scalar, False
    wants_json = bool(types & {"object", "array"})
    if wants_json or (not types and stripped[:1] in ("{", "[")):
        try:
            return loads_lenient(stripped)
        except Unrepairable:
            logger.warning("parameter value is not JSON, kept as text: %r", text[:200])
    return text, False


_NO = object()


def _scalar(text: str, kind: str) -> Any:
    lowered = text.lower()
    if kind == "boolean":
        return {"true": True, "false": False, "1": True, "0": False}.get(lowered, _NO)
    if kind == "null":
        return None if lowered in ("null", "none", "") else _NO
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return _NO
    if kind == "integer" and number.is_integer() and "e" not in lowered:
        return int(number)
    return number if kind == "number" else _NO


def arguments_json(arguments: Mapping[str, Any]) -> str:
    """Arguments as the JSON text every dialect sends (non-ASCII kept as written)."""
    return json.dumps(dict(arguments), ensure_ascii=False)
