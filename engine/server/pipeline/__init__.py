"""One request pipeline for every API dialect (OpenAI chat/completions, Ollama, LM Studio,
Anthropic Messages, OpenAI Responses, the desktop chat).

A dialect is a translator and a renderer: it parses its own wire format into one
:class:`GenerateRequest`, calls :class:`Pipeline`, and renders the :data:`PipelineEvent` items it
gets back as SSE chunks, SSE with ``event:`` lines, NDJSON or one JSON body. Model
resolution and loading, submission, reasoning and tool-call parsing, usage and timings, and
the mapping of engine failures to typed errors happen here once (as Ollama's ChatHandler and
vLLM's serving classes do). Failures are raised as
:class:`engine.server.errors.APIError` (status, code, param, message); each dialect renders
that in its own error shape.

The entry points (``Pipeline`` in ``run.py``)::

    generation = await pipeline.start(request)   # APIError before any byte is sent
    generation.started                           # Started: model id, prompt tokens
    async for event in generation: ...           # reply events, then Done; an engine
                                                 # failure mid-stream raises APIError
    generation.cancel()                          # leaving the loop early also cancels
    reply = await pipeline.collect(request)      # Reply: the whole answer, parsed

Modules: ``request`` (the request), ``events`` (what comes back), ``run`` (the pipeline),
``plan`` (tool syntax, constraint, reply parsing), ``models`` (which model serves it),
``engine`` (the engine interface and its failures as APIErrors).

Threading: everything here runs on the server's event loop (or a desktop worker thread's
own loop); the engine is reached only through async streams.
"""

from engine.server.pipeline.events import (
    Done,
    FinishReason,
    Logprobs,
    PipelineEvent,
    Reply,
    Started,
    Timings,
    Usage,
)
from engine.server.pipeline.request import Dialect, GenerateRequest, ToolChoice, ToolMode
from engine.server.pipeline.run import Generation, Pipeline

__all__ = [
    "Dialect",
    "Done",
    "FinishReason",
    "GenerateRequest",
    "Generation",
    "Logprobs",
    "Pipeline",
    "PipelineEvent",
    "Reply",
    "Started",
    "Timings",
    "ToolChoice",
    "ToolMode",
    "Usage",
]
