"""Short, client-safe messages from library exceptions.

OpenVINO, GenAI and XGrammar put build paths, timestamps and C++ check expressions in their
messages (``[18:16:53] /home/jenkins/.../regex_converter.cc:75: Regex parsing error ...``,
``Check 'temperature > 0' failed at src/cpp/src/generation_config.cpp:344:\\nWhen ...``).
A client needs only the sentence at the end; the full text goes to the engine log.
"""

from __future__ import annotations

import re

MAX_MESSAGE_CHARS = 300
# The pipe to the server failed: the worker has nobody left to serve and must not carry on.
PIPE_ERRORS: tuple[type[BaseException], ...] = (EOFError, ConnectionError)

# "[18:16:53] /path/to/file.cc:75: " (XGrammar) and "Exception from src/x.cpp:12:" (OpenVINO).
_SOURCE_PREFIX = re.compile(r"^(\[[^\]]*\]\s*)?(Exception from\s+)?\S+\.(cc|cpp|hpp|h):\d+:\s*")
# "Check 'temperature > 0' failed at src/cpp/src/generation_config.cpp:344:" (a line alone).
_CHECK_LINE = re.compile(r"^Check .* failed at \S+:\d+:?\s*$")
# XGrammar's "Check failed: (cond) is false: " before the real message.
_CHECK_PREFIX = re.compile(r"^Check failed: \(.*?\) is false:\s*")


def short_error(exc: BaseException) -> str:
    """The human part of ``exc``'s message: no source paths, check expressions or traces."""
    lines = []
    for raw in str(exc).splitlines():
        line = raw.strip()
        if not line or _CHECK_LINE.match(line) or line.startswith(("Traceback", 'File "')):
            continue
        line = _CHECK_PREFIX.sub("", _SOURCE_PREFIX.sub("", line))
        if line:
            lines.append(line)
    text = " ".join(lines) or type(exc).__name__
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 3] + "..."
