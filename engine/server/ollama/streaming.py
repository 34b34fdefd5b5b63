"""Newline-delimited JSON, the way Ollama streams, with the same disconnect-cancels rule.

Reuses :class:`engine.server.streaming.EventStreamResponse`'s race against
``http.disconnect`` so a client that hangs up stops its generation within one engine step.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from engine.server.streaming import EventStreamResponse

MEDIA_TYPE = "application/x-ndjson"


def ndjson(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n"


class NDJSONResponse(EventStreamResponse):
    """``application/x-ndjson`` lines, cancelled as soon as the client disconnects."""

    def __init__(self, content: AsyncIterator[str]) -> None:
        super().__init__(content, media_type=MEDIA_TYPE)
