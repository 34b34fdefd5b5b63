"""Device discovery on the real CPU, and on a stand-in Core for the GPU/NPU this machine lacks."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any, ClassVar

from engine.devices import discover_devices


def test_real_cpu_is_discovered() -> None:
    devices = discover_devices()
    cpu = next(d for d in devices if d.name == "CPU")
    assert cpu.kind == "cpu"
    assert cpu.full_name and cpu.full_name != "CPU"
    assert cpu.device_type is None  # "integrated" means nothing for a CPU


class LaptopCore:
    """Stands in for ``openvino.Core`` on a ThinkPad with an iGPU, a dGPU and an NPU.

    A mock because no GPU or NPU exists on the test machines; property names and value
    shapes are OpenVINO's own.
    """

    available_devices: ClassVar[list[str]] = ["CPU", "GPU.0", "GPU.1", "NPU"]
    props: ClassVar[dict[str, dict[str, Any]]] = {
        "CPU": {
            "FULL_DEVICE_NAME": "Intel(R) Core(TM) Ultra 7 155H",
            "DEVICE_TYPE": "Type.INTEGRATED",
        },
        "GPU.0": {
            "FULL_DEVICE_NAME": "Intel(R) Arc(TM) Graphics (iGPU)",
            "DEVICE_TYPE": "Type.INTEGRATED",
            "GPU_DEVICE_TOTAL_MEM_SIZE": 8 * 2**30,
        },
        "GPU.1": {
            "FULL_DEVICE_NAME": "Intel(R) Arc(TM) A370M (dGPU)",
            "DEVICE_TYPE": "Type.DISCRETE",
            "GPU_DEVICE_TOTAL_MEM_SIZE": 4 * 2**30,
        },
        "NPU": {"FULL_DEVICE_NAME": "Intel(R) AI Boost"},
    }

    def get_property(self, device: str, key: str) -> Any:
        if device == "NPU" and key == "FULL_DEVICE_NAME":
            return self.props[device][key]
        if key == "SUPPORTED_PROPERTIES":
            if device == "NPU":
                raise RuntimeError("driver does not list properties")
            return list(self.props[device])
        return self.props[device][key]


def test_laptop_devices_are_described() -> None:
    devices = {d.name: d for d in discover_devices(LaptopCore())}
    assert list(devices) == ["CPU", "GPU.0", "GPU.1", "NPU"]
    assert devices["GPU.0"].device_type == "integrated"
    assert devices["GPU.1"].device_type == "discrete"
    assert devices["GPU.1"].memory_bytes == 4 * 2**30
    assert devices["GPU.1"].label == "GPU.1: Intel(R) Arc(TM) A370M (dGPU) (discrete, 4.0 GiB)"
    # A plugin that answers nothing still yields a usable entry.
    assert devices["NPU"].kind == "npu" and devices["NPU"].memory_bytes is None


def test_cli_devices_json() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "engine.cli", "devices", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(out.stdout)
    assert data[0]["name"] == "CPU" and "full_name" in data[0]
    text = subprocess.run(
        [sys.executable, "-m", "engine.cli", "devices"], capture_output=True, text=True, check=True
    )
    assert text.stdout.startswith("CPU: ")
