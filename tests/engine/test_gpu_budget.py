"""A GPU's own memory caps the memory budget (issue 11: "device memory for the iGPU").

No GPU can exist on the test machine: the OpenVINO properties a GPU plugin would answer
are injected as a property dict behind a stand-in for ``ov.Core`` (only
``get_property``), and the description and budget arithmetic built from them are real.
The CPU path reads the real OpenVINO device.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engine.devices import describe
from engine.settings import Settings, load_settings
from engine.supervisor import budget

GIB = 2**30


class PropertyCore:
    """Answers ``get_property`` from a dict, as OpenVINO's Core does for one device."""

    def __init__(self, properties: dict[str, Any]) -> None:
        self.properties = properties

    def get_property(self, device: str, key: str) -> Any:
        if key == "SUPPORTED_PROPERTIES":
            return list(self.properties)
        return self.properties[key]


def _gpu(device_type: str, memory_gib: float) -> Any:
    core = PropertyCore(
        {
            "FULL_DEVICE_NAME": "Intel(R) Graphics [0x7d55] (iGPU)",
            "DEVICE_TYPE": f"Type.{device_type.upper()}",
            "GPU_DEVICE_TOTAL_MEM_SIZE": int(memory_gib * GIB),
            "OPTIMIZATION_CAPABILITIES": ["FP32", "FP16", "INT8"],
        }
    )
    info = describe("GPU.0", core)
    assert info is not None
    return info


@pytest.fixture
def settings(sidelight_home: Path) -> Settings:
    return load_settings({"SIDELIGHT_HOME": str(sidelight_home)})


def test_an_integrated_gpu_caps_the_ram_budget_with_the_memory_it_may_share(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(budget, "total_ram_mb", lambda: 16384)
    igpu = _gpu("integrated", 7.5)
    assert (igpu.kind, igpu.device_type, igpu.memory_bytes) == ("gpu", "integrated", int(7.5 * GIB))
    assert budget.gpu_budget_mb(igpu) == 7680
    assert budget.budget_mb(settings) == 12288  # RAM minus max(2 GB, 25 %)
    assert budget.budget_mb(settings, igpu) == 7680  # what the driver shares is less
    roomy = _gpu("integrated", 15.0)
    assert budget.budget_mb(settings, roomy) == 12288  # then RAM's reserve is the cap


def test_a_discrete_gpu_keeps_room_for_the_display(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(budget, "total_ram_mb", lambda: 32768)
    dgpu = _gpu("discrete", 8)
    assert budget.gpu_budget_mb(dgpu) == 8192 - 819  # 10 % (more than 512 MB)
    small = _gpu("discrete", 2)
    assert budget.gpu_budget_mb(small) == 2048 - 512
    assert budget.budget_mb(settings, dgpu) == 7373
    # An explicit memory_budget_mb wins, as on the CPU.
    assert budget.budget_mb(replace(settings, memory_budget_mb=20000), dgpu) == 20000


def test_devices_without_reported_memory_leave_the_ram_budget(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(budget, "total_ram_mb", lambda: 16384)
    silent = describe("GPU.1", PropertyCore({"FULL_DEVICE_NAME": "a GPU"}))
    assert silent is not None and budget.gpu_budget_mb(silent) is None
    assert budget.budget_mb(settings, silent) == 12288
    cpu = describe("CPU")  # the real OpenVINO CPU device
    assert cpu is not None and cpu.kind == "cpu"
    assert budget.gpu_budget_mb(cpu) is None
    assert budget.device_info("CPU") is None  # only a GPU is ever asked
