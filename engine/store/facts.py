"""Read what a model folder or GGUF file is from its files: precision, devices, capabilities.

Used when a model enters the store (download, conversion, import) to fill its manifest.
Nothing here loads OpenVINO: the facts come from ``config.json``, ``openvino_config.json``,
the chat template and, as a last resort, the element types named in ``openvino_model.xml``.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.gguf import GGUFError, read_metadata
from engine.models import (
    GGUF_FILE_TYPES,
    ModelTask,
    read_chat_template,
    read_json,
    task_from_config,
)
from engine.parsing.reasoning import template_supports_reasoning

logger = logging.getLogger(__name__)

_ELEMENT_TYPE = re.compile(rb'element_type="([a-z0-9]+)"')
_XML_SCAN_LIMIT = 64 * 1024 * 1024


@dataclass(frozen=True)
class ModelFacts:
    """What the files say about a model; any field may be unknown."""

    weights: str | None = None
    devices: tuple[str, ...] = ("CPU", "GPU")
    task: ModelTask = "chat"
    capabilities: dict[str, bool] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)


def folder_size(path: Path) -> int:
    """Bytes on disk of a file or of every regular file under a folder (links not followed).

    The folder may be changing while it is measured (a conversion's progress: its child
    writes and removes temporary folders inside it): a file or folder that is gone by the
    time it is read counts nothing, rather than failing the measurement and its caller.
    """
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(path, onerror=lambda _exc: None):
        for name in files:
            try:
                info = os.lstat(os.path.join(root, name))
            except OSError:  # removed meanwhile
                continue
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total


def ir_facts(folder: Path) -> ModelFacts:
    """Facts about an OpenVINO IR folder exported by optimum-intel (or shaped like one)."""
    config = read_json(folder / "config.json")
    quant = read_json(folder / "openvino_config.json").get("quantization_config") or {}
    weights, channel_wise_sym = _ir_weights(folder, quant)
    devices = ("CPU", "GPU", "NPU") if channel_wise_sym else ("CPU", "GPU")
    task = task_from_config(config)
    template = read_chat_template(folder)
    details: dict[str, Any] = {}
    recipe = {k: quant[k] for k in ("bits", "sym", "group_size", "ratio") if k in quant}
    if recipe:
        details["quantization"] = recipe
    capabilities = template_capabilities(template)
    if task == "vision":
        capabilities["vision"] = True  # the manifest says it sees (clients enable images)
        devices = ("CPU", "GPU")  # served by continuous batching only (not the NPU yet)
    return ModelFacts(
        weights=weights,
        devices=devices,
        task=task,
        capabilities=capabilities,
        details=details,
    )


def gguf_facts(file: Path) -> ModelFacts:
    """Facts about a GGUF file from its header."""
    try:
        meta = read_metadata(file)
    except GGUFError:
        return ModelFacts()
    file_type = meta.get("general.file_type")
    weights = GGUF_FILE_TYPES.get(int(file_type)) if file_type is not None else None
    template = meta.get("tokenizer.chat_template")
    return ModelFacts(
        weights=weights,
        devices=("CPU", "GPU"),
        capabilities=template_capabilities(template if isinstance(template, str) else None),
    )


def template_capabilities(template: str | None) -> dict[str, bool]:
    """What a chat template can do, judged from the variables and tags it uses."""
    if not template:
        return {"chat_template": False, "tools": False, "reasoning": False}
    return {
        "chat_template": True,
        "tools": "tools" in template or "tool_call" in template,
        "reasoning": template_supports_reasoning(template),
    }


def _ir_weights(folder: Path, quant: dict[str, Any]) -> tuple[str | None, bool]:
    bits = quant.get("bits")
    if isinstance(bits, int):
        channel_wise_sym = bool(quant.get("sym")) and quant.get("group_size") == -1
        return f"int{bits}", channel_wise_sym
    xml = folder / "openvino_model.xml"
    if not xml.is_file():  # a vision-language export: its language model holds the weights
        xml = folder / "openvino_language_model.xml"
    if not xml.is_file():  # a speech recogniser: the decoder holds most of the weights
        xml = folder / "openvino_decoder_model.xml"
    return _scan_xml_weights(xml), False


def _scan_xml_weights(xml: Path) -> str | None:
    """Guess weight precision from the element types an IR declares (lowest wins)."""
    try:
        with xml.open("rb") as fh:
            types = set(_ELEMENT_TYPE.findall(fh.read(_XML_SCAN_LIMIT)))
    except OSError:
        return None
    for names, label in (
        ({b"u4", b"i4", b"nf4"}, "int4"),
        ({b"u8", b"i8"}, "int8"),
        ({b"f16"}, "fp16"),
        ({b"f32"}, "fp32"),
    ):
        if types & names:
            return label
    return None
