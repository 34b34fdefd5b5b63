"""Discover the OpenVINO devices on this machine (CPU, GPU.0/GPU.1, NPU).

Discovery asks OpenVINO's ``Core`` for each device's full name, type and, where the device
reports it, memory. Any property a plugin does not support is left empty rather than failing:
an NPU driver that answers nothing about memory still shows up as a usable device.

Threading: one ``Core`` serves every caller, under a lock. A new ``Core`` per call loads
each device plugin's library again (and its drivers: OpenCL for the GPU plugin) and unloads
it when the ``Core`` goes; done on a pool thread while Qt's event loop ran, that crashed the
tray app's process now and then (a segfault on the GUI thread, seen in the desktop tests).
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeviceInfo:
    """One OpenVINO device as a person would want it described."""

    name: str  # OpenVINO's device name: "CPU", "GPU.0", "NPU"
    full_name: str
    kind: str  # "cpu", "gpu" or "npu" (family, from the name)
    device_type: str | None = None  # "integrated" / "discrete" where reported
    memory_bytes: int | None = None  # dedicated/total device memory where reported
    capabilities: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["capabilities"] = list(self.capabilities)
        return data

    @property
    def label(self) -> str:
        """Menu text: what the device is, with its memory when known."""
        extra = []
        if self.device_type:
            extra.append(self.device_type)
        if self.memory_bytes:
            extra.append(f"{self.memory_bytes / 2**30:.1f} GiB")
        suffix = f" ({', '.join(extra)})" if extra else ""
        return f"{self.name}: {self.full_name}{suffix}"


_LOCK = threading.Lock()


@functools.cache
def _shared_core() -> Any:
    """The process's one discovery ``Core`` (call with :data:`_LOCK` held)."""
    import openvino as ov

    return ov.Core()


def discover_devices(core: Any | None = None) -> list[DeviceInfo]:
    """List available devices; never raises for a single misbehaving plugin. Any thread."""
    if core is None:
        with _LOCK:
            return _discover(_shared_core())
    return _discover(core)


def _discover(core: Any) -> list[DeviceInfo]:
    devices = []
    for name in core.available_devices:
        try:
            devices.append(_describe(core, name))
        except Exception:
            logger.warning("device %s did not describe itself", name, exc_info=True)
            devices.append(DeviceInfo(name=name, full_name=name, kind=_kind(name)))
    return devices


def describe(name: str, core: Any | None = None) -> DeviceInfo | None:
    """One device by name (``"GPU"``, ``"GPU.1"``), or None when OpenVINO does not have it.

    Imports OpenVINO in this process (tens of MB): the scheduler calls it only for a GPU,
    once per device (:func:`engine.supervisor.budget.device_info`).
    """
    if core is None:
        with _LOCK:
            return describe(name, _shared_core())
    try:
        return _describe(core, name)
    except Exception:
        logger.warning("device %s did not describe itself", name, exc_info=True)
        return None


def _describe(core: Any, name: str) -> DeviceInfo:
    full_name = str(_property(core, name, "FULL_DEVICE_NAME") or name)
    device_type = _property(core, name, "DEVICE_TYPE")
    memory = _property(core, name, "GPU_DEVICE_TOTAL_MEM_SIZE")
    capabilities = _property(core, name, "OPTIMIZATION_CAPABILITIES") or ()
    kind = _kind(name)
    # Only a GPU's integrated/discrete answer means something to a person.
    kind_text = (
        str(device_type).rsplit(".", 1)[-1].lower() if kind == "gpu" and device_type else None
    )
    return DeviceInfo(
        name=name,
        full_name=full_name.strip(),
        kind=kind,
        device_type=kind_text,
        memory_bytes=int(memory) if memory else None,
        capabilities=tuple(str(c) for c in capabilities),
    )


def _kind(name: str) -> str:
    return name.split(".", 1)[0].lower()


def _property(core: Any, device: str, key: str) -> Any:
    try:
        if key not in core.get_property(device, "SUPPORTED_PROPERTIES"):
            return None
        return core.get_property(device, key)
    except Exception:
        return None
