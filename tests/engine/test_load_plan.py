"""The load configuration built for each device, and NPU admission by its prompt limit.

GPU and NPU cannot run here: only the device *name* is set to them (nothing is compiled),
and the plan -- pipeline kind, OpenVINO properties (``CACHE_DIR``, ``MAX_PROMPT_LEN``,
``MIN_RESPONSE_LEN``), context -- is what is tested. NPU admission runs the real ``prepare``
with the tiny model's real tokenizer and the NPU's prompt limit.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from engine.context_fit import GIB
from engine.models import spec_from_path
from engine.settings import load_settings
from engine.worker.load_plan import plan_load
from engine.worker.messages import GenerationRequest, LoadModel, SamplingParams
from engine.worker.prepare import RequestError, prepare
from tests.conftest import TINY_CODER

CACHE = "/tmp/sidelight-compiled"


def _command(device: str, tmp_path: Path, kv_cache_gb: float = 1.0) -> LoadModel:
    settings = load_settings({"SIDELIGHT_HOME": str(tmp_path)})
    return LoadModel(
        spec=spec_from_path(TINY_CODER),
        device=device,
        properties=settings.device_properties(device),
        kv_cache_gb=kv_cache_gb,
        compile_cache_dir=CACHE,
    )


def test_cpu_gets_no_compile_cache_and_the_batched_pipeline(tmp_path: Path) -> None:
    plan = plan_load(_command("CPU", tmp_path))
    assert plan.kind == "batched"
    assert "CACHE_DIR" not in plan.properties
    assert "MAX_PROMPT_LEN" not in plan.properties
    assert (plan.context_length, plan.prompt_limit, plan.cache_size_gb) == (2048, None, 1)


@pytest.mark.parametrize("device", ["GPU", "GPU.1"])
def test_gpu_gets_the_compile_cache_and_f16_kv(device: str, tmp_path: Path) -> None:
    plan = plan_load(_command(device, tmp_path))
    assert plan.properties == {"CACHE_DIR": CACHE}
    assert plan.kind == "batched" and plan.fit.precision == "f16"


def test_npu_gets_the_compile_cache_and_its_static_prompt_shape(tmp_path: Path) -> None:
    plan = plan_load(_command("NPU", tmp_path))
    assert plan.kind == "serial"
    assert plan.properties == {
        "CACHE_DIR": CACHE,
        "MAX_PROMPT_LEN": 4096,
        "MIN_RESPONSE_LEN": 512,
    }
    assert plan.prompt_limit == 4096
    assert plan.context_length == 2048  # the model's own limit is smaller than 4096 + 512


def test_npu_settings_shape_the_prompt_limit(tmp_path: Path) -> None:
    settings = load_settings(
        {
            "SIDELIGHT_HOME": str(tmp_path),
            "SIDELIGHT_NPU_MAX_PROMPT_LEN": "1024",
            "SIDELIGHT_NPU_MIN_RESPONSE_LEN": "128",
        }
    )
    command = LoadModel(
        spec=spec_from_path(TINY_CODER),
        device="NPU",
        properties=settings.device_properties("NPU"),
        kv_cache_gb=1.0,
    )
    plan = plan_load(command)
    assert (plan.prompt_limit, plan.context_length) == (1024, 1152)
    assert "CACHE_DIR" not in plan.properties  # no cache folder given, none invented


def test_a_small_budget_lowers_the_served_context(tmp_path: Path) -> None:
    per_token = 2 * 1 * 2 * (16 + 8)  # tiny-coder: 1 layer, 2 KV heads of 16, u8 + scales
    plan = plan_load(_command("CPU", tmp_path, kv_cache_gb=1024 * per_token / GIB))
    assert plan.fit.limited_by == "memory"
    assert plan.context_length == 1024


def test_npu_admission_refuses_a_prompt_past_max_prompt_len_with_both_numbers() -> None:
    import openvino_genai as ov_genai

    tokenizer = ov_genai.Tokenizer(str(TINY_CODER))
    base = ov_genai.GenerationConfig()
    base.set_eos_token_id(0)
    prompt = "def f(x):\n" * 40
    count = len(tokenizer.encode(prompt).input_ids.data[0])
    request = GenerationRequest(
        request_id=1, prompt=prompt, sampling=SamplingParams(), max_tokens=4
    )
    with pytest.raises(RequestError) as caught:
        prepare(request, tokenizer, base, 1152, prompt_limit=count - 1)
    assert caught.value.code == "context_length_exceeded"
    assert str(count) in str(caught.value) and str(count - 1) in str(caught.value)
    admitted = prepare(request, tokenizer, base, 1152, prompt_limit=count)
    assert len(admitted.prompt_ids) == count


def test_a_kv_precision_property_sizes_the_context_at_that_precision(tmp_path: Path) -> None:
    """A model's own ``kv_cache_precision`` (or ``cpu_kv_cache_precision``) reaches the load
    as ``KV_CACHE_PRECISION``: the context that fits is sized at its bytes per element."""
    per_token_u8 = 2 * 1 * 2 * (16 + 8)  # tiny-coder: 1 layer, 2 KV heads of 16, u8 + scales
    command = _command("CPU", tmp_path, kv_cache_gb=1024 * per_token_u8 / GIB)
    f32 = dataclasses.replace(command, properties={"KV_CACHE_PRECISION": "f32"})
    plan = plan_load(f32)
    assert plan.fit.precision == "f32"
    assert plan.context_length == 1024 * per_token_u8 // (2 * 1 * 2 * 16 * 4)
