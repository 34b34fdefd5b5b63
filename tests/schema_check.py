"""A plain validator for the JSON Schema subset Sidelight enforces, for tests to check replies.

Covers what ``engine.worker.json_grammar`` supports: types and type lists, enum, const,
anyOf/oneOf/allOf, local ``$ref``, objects (properties in declared order, required,
additionalProperties), arrays, string lengths and patterns (Python's ``re.search``, which
reads the supported ECMA-262 subset alike), string formats and numeric bounds.
"""

from __future__ import annotations

import ipaddress
import re
import uuid
from collections.abc import Callable
from datetime import date, datetime
from typing import Any
from urllib.parse import urlsplit


def is_compact(text: str) -> bool:
    """No whitespace outside JSON strings but one optional space after a ``,`` or ``:``."""
    outside = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    return not re.search(r"\s", re.sub(r"(?<=[,:]) ", "", outside))


def conforms(schema: Any, value: Any, root: Any = None) -> bool:
    """Whether ``value`` is valid against ``schema`` (``root`` resolves ``$ref``; default: itself)."""
    root = schema if root is None else root
    if schema is True:
        return True
    if "$ref" in schema:
        target = root
        for part in schema["$ref"][2:].split("/"):
            target = target[part]
        return conforms(target, value, root)
    if "const" in schema or "enum" in schema:
        allowed = [schema["const"]] if "const" in schema else schema["enum"]
        return any(value == v and type(value) is type(v) for v in allowed)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            test = all if key == "allOf" else any
            return test(conforms(s, value, root) for s in schema[key])
    kinds = _kinds(schema)
    return kinds is None or any(_conforms_type(schema, kind, value, root) for kind in kinds)


def _kinds(schema: dict[str, Any]) -> list[str] | None:
    """The types ``schema`` allows (``None``: any)."""
    kinds = schema.get("type")
    if kinds is None:
        if "properties" in schema or "additionalProperties" in schema:
            return ["object"]
        return ["array"] if "items" in schema else None
    return kinds if isinstance(kinds, list) else [kinds]


_SCALARS = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}


def _conforms_type(schema: dict[str, Any], kind: str, value: Any, root: Any) -> bool:
    if kind in ("number", "integer"):
        return bool(_SCALARS[kind](value)) and _in_bounds(schema, value)
    if kind in _SCALARS:
        return bool(_SCALARS[kind](value))
    if kind == "string":
        low, high = schema.get("minLength", 0), schema.get("maxLength", 1 << 30)
        pattern = schema.get("pattern")
        return (
            isinstance(value, str)
            and low <= len(value) <= high
            and (pattern is None or re.search(pattern, value) is not None)
            and _has_format(schema.get("format"), value)
        )
    if kind == "array":
        low, high = schema.get("minItems", 0), schema.get("maxItems", 1 << 30)
        items = schema.get("items", True)
        return (
            isinstance(value, list)
            and low <= len(value) <= high
            and all(conforms(items, v, root) for v in value)
        )
    return isinstance(value, dict) and _conforms_object(schema, value, root)


def _has_format(name: str | None, value: str) -> bool:
    """Whether ``value`` is in the string format ``name`` (the ones Sidelight writes)."""
    if name is None:
        return True
    checks: dict[str, Callable[[str], object]] = {
        "date": lambda v: re.fullmatch(r"\d{4}-\d\d-\d\d", v) and date.fromisoformat(v),
        "time": lambda v: re.fullmatch(_TIME, v),
        "date-time": lambda v: (
            re.fullmatch(r"\d{4}-\d\d-\d\d[Tt]" + _TIME, v) and datetime.fromisoformat(v.upper())
        ),
        "uuid": lambda v: len(v) == 36 and uuid.UUID(v),
        "ipv4": lambda v: str(ipaddress.IPv4Address(v)) == v,
        "hostname": lambda v: len(v) <= 253 and re.fullmatch(_HOST, v),
        "email": lambda v: re.fullmatch(r"[^@\s]{1,64}@" + _HOST, v) and "." in v.split("@")[1],
        "uri": lambda v: (parts := urlsplit(v)).scheme and parts.netloc,
    }
    try:
        return bool(checks[name](value))
    except ValueError:
        return False


_TIME = r"([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)"
_HOST = (
    r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)


def _in_bounds(schema: dict[str, Any], value: float) -> bool:
    low, high = schema.get("minimum"), schema.get("maximum")
    low_x, high_x = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    return (
        (low is None or value >= low)
        and (high is None or value <= high)
        and (low_x is None or value > low_x)
        and (high_x is None or value < high_x)
    )


def _conforms_object(schema: dict[str, Any], value: dict[str, Any], root: Any) -> bool:
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties", not props)
    if any(key not in value for key in schema.get("required", [])):
        return False
    order = [key for key in props if key in value]
    if [key for key in value if key in props] != order:  # declared order, as documented
        return False
    return all(
        (sub := props.get(key, extra)) is not False and conforms(sub, item, root)
        for key, item in value.items()
    )
