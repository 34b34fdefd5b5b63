"""Read a request body as a JSON object, refusing what is JSON to Python but not to anyone else.

Python's ``json`` accepts ``NaN`` and ``Infinity``, turns ``1e999`` into infinity, keeps a
lone UTF-16 surrogate (``"\\ud800"``) as a string no encoder can write, and nests as deep as
the interpreter's recursion allows. Each of those reached the engine (a crashed worker, a
tokenizer exception, a 500 while encoding the answer), so one check of the parsed tree, for
every route of every dialect, refuses them with a 400 naming the field:

- nesting deeper than :data:`MAX_JSON_DEPTH` (the param is the top-level field);
- a string or key holding a lone surrogate;
- a number that is not finite;
- an integer outside ``[-2**63, 2**64 - 1]`` (no engine field holds more).

The body must be UTF-8 (RFC 8259; a BOM is tolerated), so the only way to a lone surrogate
is a ``\\uD800``-``\\uDFFF`` escape. The walk is iterative and touches each value once; the
common case (no such escape in the body) skips the string checks. Python's parser stops at
its recursion limit (about 1000 levels); that ``RecursionError`` is a 400 too.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from engine.server.errors import APIError
from engine.server.fields import INT64_MIN, UINT64_MAX

MAX_JSON_DEPTH = 64

# A \uD800-\uDFFF escape: the only way a lone surrogate gets into a decoded body.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_MESSAGE = (
    "contains a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape), which is not text"
)

Path = tuple[str | int, ...]


def read_json_object(raw: bytes) -> dict[str, Any]:
    """The body as a dict, checked as the module docstring says.

    Raises:
        APIError: 400 for a body that is not a JSON object or fails a check.
    """
    try:
        text = raw.decode("utf-8-sig")  # JSON between systems is UTF-8 (RFC 8259)
    except UnicodeDecodeError as exc:
        raise APIError(400, f"the request body is not valid UTF-8 text (byte {exc.start})") from exc
    try:
        data = json.loads(text)
    except RecursionError:
        raise _too_deep(None) from None
    except json.JSONDecodeError as exc:
        raise APIError(400, f"the request body is not valid JSON: {exc}") from exc
    except ValueError as exc:  # an integer literal longer than Python converts
        raise APIError(400, f"the request body has an unusable number: {exc}") from exc
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object")
    problem = _first_problem(data, check_strings=bool(_SURROGATE_ESCAPE.search(text)))
    if problem is not None:
        path, message = problem
        param = ".".join(str(p) for p in path) if path else None
        raise APIError(
            400, f"{param}: {message}" if param else message, param=param, code="invalid_value"
        )
    return data


def _too_deep(field: str | int | None) -> APIError:
    message = f"the JSON is nested deeper than {MAX_JSON_DEPTH} levels"
    if field is None:
        return APIError(400, f"the request body: {message}", code="too_deep")
    return APIError(400, f"{field}: {message}", param=str(field), code="too_deep")


def _first_problem(data: dict[str, Any], *, check_strings: bool) -> tuple[Path, str] | None:
    """The path and description of the first bad value, or ``None``."""
    stack: list[tuple[Any, int, Path]] = [(data, 1, ())]
    while stack:
        value, depth, path = stack.pop()
        items: Any = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in items:
            kind = type(child)
            if kind is str:
                if check_strings and _SURROGATE.search(child):
                    return (*path, key), _SURROGATE_MESSAGE
            elif kind is dict or kind is list:
                if depth >= MAX_JSON_DEPTH:
                    raise _too_deep(path[0] if path else key)
                stack.append((child, depth + 1, (*path, key)))
            elif kind is float:
                if not math.isfinite(child):
                    return (*path, key), "must be a finite number (NaN and Infinity are not JSON)"
            elif kind is int and not INT64_MIN <= child <= UINT64_MAX:
                return (*path, key), "must be an integer that fits in 64 bits"
            if check_strings and type(key) is str and _SURROGATE.search(key):
                # The key itself cannot be quoted back: it is not encodable text.
                return path, f"a key {_SURROGATE_MESSAGE}"
    return None
