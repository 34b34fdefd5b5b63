"""Short, client-safe messages from library exceptions.

OpenVINO, GenAI and XGrammar put build paths, timestamps and C++ check expressions in their
messages (``[18:16:53] /home/jenkins/.../regex_converter.cc:75: Regex parsing error ...``,
``Check 'temperature > 0' failed at src/cpp/src/generation_config.cpp:344:\\nWhen ...``).
A client needs only the sentence at the end; the full text goes to the engine log.
"""

from __future__ import annotations

import json
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


# Words of OpenVINO's and GenAI's messages when a model's files are refused: its IR reader,
# its graph validation on load, the C++ JSON parser (configs) and Python's (our own reads).
_FILE_REFUSALS = (
    "Unable to read the model",
    "xml_deserialize",
    "frontends/ir",
    "pugi",
    "bin file",
    "Incorrect weights",
    "While validating node",
    "json.exception",
    "model_reader",
)
_NO_MEMORY = ("bad_alloc", "out of memory", "Cannot allocate", "Failed to allocate")
_FILE_NAME = re.compile(r"([\w.-]+\.(?:xml|bin|json|gguf))\b")


def load_failure(exc: BaseException) -> tuple[str, bool]:
    """A failed model load as one client-safe sentence, and whether the model's files were
    refused (then the request is answered 422 "damaged", not 500).

    The sentence never carries the library's text (source paths, check expressions, JSON
    parser internals): the engine log has it, where :func:`logging.Logger.exception` put it.
    """
    text = str(exc)
    refused = isinstance(exc, (UnicodeDecodeError, json.JSONDecodeError)) or any(
        marker in text for marker in _FILE_REFUSALS
    )
    if refused:
        named = _FILE_NAME.search(text)
        which = named.group(1).rsplit("/", 1)[-1] if named else "one of the model's files"
        return (
            f"OpenVINO could not read {which}: it is damaged, cut short or belongs to another "
            "model (the engine log has OpenVINO's message)",
            True,
        )
    if isinstance(exc, MemoryError) or any(marker in text for marker in _NO_MEMORY):
        return "there was not enough memory to load it", False
    return f"{short_error(exc)} (the engine log has the details)", False
