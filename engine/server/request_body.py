"""A request body as a dialect's pydantic request model; a bad field is a 400 naming it.

Every dialect's routes start here (then translate the model into a
:class:`engine.server.pipeline.GenerateRequest`). Runs on the event loop: a large body is
parsed on a thread so the loop keeps serving streams.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from engine.server.errors import APIError
from engine.server.json_body import read_json_object

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

_INLINE_PARSE_BYTES = 256 * 1024


async def parse_body(request: Request, model_type: type[M]) -> M:
    """Read and validate the JSON body; unknown fields the model keeps are logged.

    Raises:
        APIError: 400 naming the first bad field (``param`` is its dotted path).
    """
    raw = await request.body()
    if len(raw) > _INLINE_PARSE_BYTES:
        data = await asyncio.to_thread(read_json_object, raw)
    else:
        data = read_json_object(raw)
    try:
        parsed = model_type.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        param = ".".join(str(p) for p in error["loc"]) or None
        message = error["msg"].removeprefix("Value error, ")
        named = message.split(":", 1)[0]
        if param is None and named in model_type.model_fields:
            param, message = named, message.split(":", 1)[1].strip()
        raise APIError(
            400, f"{param}: {message}" if param else message, param=param, code="invalid_value"
        ) from exc
    unknown: list[str] = getattr(parsed, "unknown_fields", list)()
    if unknown:
        logger.info("%s: ignoring unknown fields %s", request.url.path, ", ".join(unknown))
    return parsed
