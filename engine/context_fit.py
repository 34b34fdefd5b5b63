"""How much context a model is served with: the largest that fits the KV-cache budget.

Pure arithmetic (no OpenVINO), so the worker sizes its cache with it and tests check it over
real architectures' dimensions. The KV cache holds, per token, a key and a value vector per
layer and KV head::

    bytes per token = 2 * layers * kv_heads * head_dim * bytes per element

Element size follows the device's KV-cache precision: OpenVINO's CPU plugin defaults
``KV_CACHE_PRECISION`` to u8 (queried from openvino 2026.4: ``uint8_t``, with a per-token
scale and zero point per head, counted here as two f32), GPU keeps f16. NPU has no paged KV
cache: its context is the static ``MAX_PROMPT_LEN + MIN_RESPONSE_LEN`` (see
``engine.worker.npu``), so this module reports ``None`` precision for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

KVPrecision = Literal["u8", "f16", "bf16", "f32"]
LimitedBy = Literal["model", "memory", "unknown"]
GIB = 1 << 30
_BYTES: dict[KVPrecision, int] = {"u8": 1, "f16": 2, "bf16": 2, "f32": 4}
U8_SCALE_BYTES = 8  # a f32 scale and a f32 zero point per head and token, for K and for V


@dataclass(frozen=True)
class KVDims:
    """The dimensions that size a model's KV cache."""

    layers: int
    kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class ContextFit:
    """The context a model is served with and the KV cache that holds it."""

    context_length: int | None  # None: neither the model nor its dimensions say
    kv_cache_bytes: int  # what ``context_length`` tokens take (0 when unknown)
    precision: KVPrecision | None
    limited_by: LimitedBy

    @property
    def cache_size_gb(self) -> int:
        """GenAI's ``SchedulerConfig.cache_size`` (whole GB, at least 1)."""
        return max(1, math.ceil(self.kv_cache_bytes / GIB))


def kv_precision_for(device: str) -> KVPrecision | None:
    """The KV-cache precision the device's plugin uses by default (None: NPU, no paged KV)."""
    kind = device.split(".", 1)[0].upper()
    if kind == "CPU":
        return "u8"
    if kind == "GPU":
        return "f16"
    return None


def kv_bytes_per_token(dims: KVDims, precision: KVPrecision) -> int:
    """Bytes one token of context takes in the KV cache."""
    per_head = dims.head_dim * _BYTES[precision]
    if precision == "u8":
        per_head += U8_SCALE_BYTES
    return 2 * dims.layers * dims.kv_heads * per_head


def fit_context(
    model_limit: int | None,
    dims: KVDims | None,
    budget_bytes: int,
    device: str,
    precision_property: object = None,
) -> ContextFit:
    """The largest context up to ``model_limit`` whose KV cache fits ``budget_bytes``.

    Without dimensions the model's own limit is served (and a cache of the budget); an NPU
    device is left to its static prompt limit. ``precision_property`` is the load's
    ``KV_CACHE_PRECISION`` property when one is set (a CPU setting, a model's own).

    Raises:
        ValueError: a budget of zero or less (settings validate it before this).
    """
    if budget_bytes <= 0:
        raise ValueError("the KV-cache budget must be positive")
    precision = kv_precision_for(device)
    named = str(precision_property).lower() if precision_property is not None else None
    if precision is not None and named in _BYTES:
        precision = named
    if dims is None or precision is None:
        return ContextFit(model_limit, budget_bytes if precision else 0, precision, "unknown")
    per_token = kv_bytes_per_token(dims, precision)
    fits = budget_bytes // per_token
    if model_limit is not None and model_limit <= fits:
        return ContextFit(model_limit, model_limit * per_token, precision, "model")
    return ContextFit(fits, fits * per_token, precision, "memory")


def kv_dims_from_config(config: dict[str, Any]) -> KVDims | None:
    """KV dimensions from a transformers ``config.json`` (None when it lacks them)."""
    text = config.get("text_config")
    if isinstance(text, dict) and "num_hidden_layers" not in config:
        config = text  # multimodal configs nest the language model's
    layers = _int(config, "num_hidden_layers", "n_layer", "num_layers")
    heads = _int(config, "num_attention_heads", "n_head")
    kv_heads = _int(config, "num_key_value_heads", "num_kv_heads") or heads
    head_dim = _int(config, "head_dim")
    hidden = _int(config, "hidden_size", "n_embd")
    if head_dim is None and hidden and heads:
        head_dim = hidden // heads
    if not (layers and kv_heads and head_dim):
        return None
    return KVDims(layers, kv_heads, head_dim)


def kv_dims_from_gguf(metadata: dict[str, Any], arch: str) -> KVDims | None:
    """KV dimensions from GGUF metadata (``<arch>.block_count`` and the attention keys)."""
    layers = _int(metadata, f"{arch}.block_count")
    heads = _int(metadata, f"{arch}.attention.head_count")
    kv_heads = _int(metadata, f"{arch}.attention.head_count_kv") or heads
    head_dim = _int(metadata, f"{arch}.attention.key_length")
    hidden = _int(metadata, f"{arch}.embedding_length")
    if head_dim is None and hidden and heads:
        head_dim = hidden // heads
    if not (layers and kv_heads and head_dim):
        return None
    return KVDims(layers, kv_heads, head_dim)


def _int(data: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = data.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
