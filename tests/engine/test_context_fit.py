"""The context a model is served with: the largest whose KV cache fits the budget.

Pure arithmetic over real dimensions: the tiny fixture models (read from their config.json
and GGUF metadata by ``spec_from_path``) and three real architectures' config.json values.
The per-token figures for f16 are the published ones (Qwen2.5-1.5B 28 KiB, Llama-3.2-3B
112 KiB, Qwen3-8B 144 KiB per token).
"""

from __future__ import annotations

from typing import Any

import pytest

from engine.context_fit import (
    GIB,
    KVDims,
    fit_context,
    kv_bytes_per_token,
    kv_dims_from_config,
    kv_dims_from_gguf,
    kv_precision_for,
)
from engine.models import spec_from_path
from tests.conftest import TINY_CODER, TINY_CODER_GGUF

QWEN25_1_5B: dict[str, Any] = {
    "model_type": "qwen2",
    "hidden_size": 1536,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "num_hidden_layers": 28,
    "max_position_embeddings": 32768,
}
LLAMA32_3B: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 3072,
    "num_attention_heads": 24,
    "num_key_value_heads": 8,
    "num_hidden_layers": 28,
    "head_dim": 128,
    "max_position_embeddings": 131072,
}
QWEN3_8B: dict[str, Any] = {
    "model_type": "qwen3",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 36,
    "head_dim": 128,
    "max_position_embeddings": 40960,
}
KIB = 1024


@pytest.mark.parametrize(
    ("config", "f16_per_token"),
    [(QWEN25_1_5B, 28 * KIB), (LLAMA32_3B, 112 * KIB), (QWEN3_8B, 144 * KIB)],
)
def test_kv_bytes_per_token_match_the_published_figures(
    config: dict[str, Any], f16_per_token: int
) -> None:
    dims = kv_dims_from_config(config)
    assert dims is not None
    assert kv_bytes_per_token(dims, "f16") == f16_per_token
    # u8 halves the values and adds a scale and zero point per head and token
    assert f16_per_token // 2 < kv_bytes_per_token(dims, "u8") < f16_per_token


def test_a_small_model_gets_its_whole_context() -> None:
    fit = fit_context(32768, kv_dims_from_config(QWEN25_1_5B), 1 * GIB, "CPU")
    assert (fit.context_length, fit.limited_by, fit.precision) == (32768, "model", "u8")
    assert fit.cache_size_gb == 1


def test_a_large_context_is_cut_to_what_the_budget_holds() -> None:
    dims = kv_dims_from_config(LLAMA32_3B)
    assert dims is not None
    fit = fit_context(131072, dims, 1 * GIB, "GPU.0")
    assert fit.limited_by == "memory" and fit.precision == "f16"
    assert fit.context_length == GIB // (112 * KIB)  # 9,362 tokens
    assert fit.kv_cache_bytes <= GIB
    # the same budget holds about twice as much at the CPU's u8
    cpu = fit_context(131072, dims, 1 * GIB, "CPU")
    assert cpu.context_length is not None and cpu.context_length > 1.8 * fit.context_length


def test_the_cache_size_covers_the_context_it_serves() -> None:
    dims = kv_dims_from_config(QWEN3_8B)
    assert dims is not None
    fit = fit_context(40960, dims, 8 * GIB, "GPU")
    assert fit.limited_by == "model"
    assert fit.cache_size_gb == 6  # 40,960 x 144 KiB = 5.6 GiB, rounded up
    assert fit.cache_size_gb * GIB >= fit.kv_cache_bytes


def test_the_tiny_models_dims_come_from_their_files() -> None:
    ir = spec_from_path(TINY_CODER)
    gguf = spec_from_path(TINY_CODER_GGUF)
    assert ir.kv_dims == gguf.kv_dims == KVDims(layers=1, kv_heads=2, head_dim=16)
    fit = fit_context(ir.context_length, ir.kv_dims, 1 * GIB, "CPU")
    assert fit.context_length == ir.context_length == 2048
    assert fit.kv_cache_bytes == 2048 * 2 * 1 * 2 * (16 + 8)


def test_gguf_metadata_without_key_length_uses_the_embedding_width() -> None:
    meta = {
        "llama.block_count": 28,
        "llama.attention.head_count": 24,
        "llama.attention.head_count_kv": 8,
        "llama.embedding_length": 3072,
    }
    assert kv_dims_from_gguf(meta, "llama") == kv_dims_from_config(LLAMA32_3B)


def test_unknown_dims_or_an_npu_serve_the_models_own_limit() -> None:
    assert fit_context(4096, None, GIB, "CPU").context_length == 4096
    npu = fit_context(4096, kv_dims_from_config(QWEN25_1_5B), GIB, "NPU")
    assert (npu.context_length, npu.precision) == (4096, None)
    assert kv_precision_for("NPU") is None
    assert kv_dims_from_config({"model_type": "bert"}) is None
    with pytest.raises(ValueError, match="budget"):
        fit_context(4096, None, 0, "CPU")
