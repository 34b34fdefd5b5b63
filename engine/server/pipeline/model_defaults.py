"""A model's own settings applied to a request that leaves a field out (engine.model_prefs).

What the client says always wins: only fields it did not send (``None``) take the model's
value, so an agent that sends ``temperature: 0`` keeps it while a plugin that sends nothing
gets the temperature the user chose for this model in the model manager. Pure.
"""

from __future__ import annotations

import dataclasses
import math

from engine.model_prefs import ModelPrefs
from engine.server.pipeline.request import GenerateRequest

_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "seed")


def with_model_defaults(request: GenerateRequest, prefs: ModelPrefs) -> GenerateRequest:
    """``request`` with ``prefs`` filling what it left out (the same object when nothing)."""
    sampling = request.sampling
    changes = {
        name: getattr(prefs, name)
        for name in _SAMPLING
        if getattr(sampling, name) is None and getattr(prefs, name) is not None
    }
    if changes.get("top_k") == 0:  # 0 switches top-k off: the same as not setting it
        del changes["top_k"]
    keep_alive = request.keep_alive
    if keep_alive is None and prefs.keep_alive_seconds is not None:
        seconds = prefs.keep_alive_seconds
        keep_alive = math.inf if seconds < 0 else seconds
    if not changes and keep_alive == request.keep_alive:
        return request
    return dataclasses.replace(
        request, sampling=dataclasses.replace(sampling, **changes), keep_alive=keep_alive
    )
