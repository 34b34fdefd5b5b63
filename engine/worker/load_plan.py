"""What a LoadModel becomes: pipeline kind, OpenVINO properties, context and KV cache.

Pure (no OpenVINO), so the configuration for devices this machine lacks (GPU, NPU) is built
and tested here the same way it is built for the CPU.

- Context: :func:`engine.context_fit.fit_context` -- the largest context whose KV cache fits
  ``kv_cache_gb`` at the device's KV precision, up to the model's own limit; the continuous
  batching pipeline's ``cache_size`` is sized from it.
- NPU: GenAI's NPU LLMPipeline is compiled for a static prompt length (``MAX_PROMPT_LEN``)
  and a minimum answer room (``MIN_RESPONSE_LEN``); a longer prompt gives garbage, so the
  prompt limit is enforced at admission (a 400 naming both numbers) and the context is their
  sum.
- ``CACHE_DIR``: OpenVINO's compiled-model cache under the app's cache folder for GPU and NPU,
  whose compilation takes seconds to minutes. Not for CPU: OpenVINO's CPU plugin caches only
  when asked to, and measured here it does not shorten a CPU load (see docs/benchmarks.md).

Threading: called on the worker's command thread while loading.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from engine.context_fit import GIB, ContextFit, fit_context
from engine.worker.messages import LoadModel

BackendKind = Literal["batched", "serial"]
NPU_PROMPT_KEY = "MAX_PROMPT_LEN"
NPU_RESPONSE_KEY = "MIN_RESPONSE_LEN"


@dataclass(frozen=True)
class LoadPlan:
    kind: BackendKind
    properties: dict[str, Any]
    context_length: int | None  # what the model is served with (prompt + answer)
    prompt_limit: int | None  # the longest prompt admitted (NPU's static limit), if any
    fit: ContextFit

    @property
    def cache_size_gb(self) -> int:
        return self.fit.cache_size_gb


def is_device(device: str, kind: str) -> bool:
    return device.split(".", 1)[0].upper() == kind


def plan_load(command: LoadModel) -> LoadPlan:
    """The pipeline, properties and context for ``command``."""
    spec = command.spec
    device = command.device
    properties: dict[str, Any] = dict(command.properties)
    if command.compile_cache_dir and (is_device(device, "GPU") or is_device(device, "NPU")):
        properties.setdefault("CACHE_DIR", command.compile_cache_dir)
    kind: BackendKind
    if command.backend in ("batched", "serial"):
        kind = "serial" if command.backend == "serial" else "batched"
    else:
        kind = "serial" if is_device(device, "NPU") else "batched"
    fit = fit_context(
        spec.context_length,
        spec.kv_dims,
        int(command.kv_cache_gb * GIB),
        command.device,
        properties.get("KV_CACHE_PRECISION"),
    )
    context = fit.context_length
    prompt_limit: int | None = None
    if is_device(device, "NPU"):
        prompt = int(properties.get(NPU_PROMPT_KEY, 1024))  # GenAI's defaults
        response = int(properties.get(NPU_RESPONSE_KEY, 128))
        prompt_limit = prompt
        context = prompt + response if context is None else min(context, prompt + response)
    return LoadPlan(kind, properties, context, prompt_limit, fit)
