"""What a loadable model is: an OpenVINO IR folder or a GGUF file, described by a ModelSpec.

The spec is small and picklable: the server process builds it from files on disk (no
OpenVINO import), and sends it to the engine worker, which loads it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.gguf import GGUFError, read_metadata
from engine.resources import demo_model_path

logger = logging.getLogger(__name__)

# Architectures and GGUF file types GenAI's GGUF reader handles (see DESIGN.md).
GGUF_ARCHITECTURES = frozenset({"llama", "qwen2", "qwen3"})
GGUF_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 7: "Q8_0", 14: "Q4_K_S", 15: "Q4_K_M", 18: "Q6_K"}

DEMO_MODEL_ID = "sidelight-demo"


class ModelError(ValueError):
    """A path is not a model Sidelight can serve; the message says why."""


@dataclass(frozen=True)
class ModelSpec:
    """Everything the engine needs to load and describe one model."""

    id: str
    path: Path
    format: str  # "ir" or "gguf"
    context_length: int | None = None
    architecture: str | None = None
    is_demo: bool = False
    task: str = "chat"  # "chat" (generative) or "embeddings" (an encoder served by /v1/embeddings)

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "path": str(self.path),
            "format": self.format,
            "context_length": self.context_length,
            "architecture": self.architecture,
            "demo": self.is_demo,
            "task": self.task,
        }


def spec_from_path(path: Path, model_id: str | None = None) -> ModelSpec:
    """Describe the model at ``path`` (an IR folder or a ``.gguf`` file).

    Raises:
        ModelError: the path does not exist or is not a servable model.
    """
    path = path.expanduser().resolve()
    if not path.exists():
        raise ModelError(f"no model at {path}")
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelError(f"{path.name}: a model file must be a .gguf file")
        return _gguf_spec(path, model_id or path.stem)
    return _ir_spec(path, model_id or path.name)


def _ir_spec(folder: Path, model_id: str) -> ModelSpec:
    missing = [
        name
        for name in (
            "openvino_model.xml",
            "openvino_model.bin",
            "openvino_tokenizer.xml",
            "openvino_detokenizer.xml",
        )
        if not (folder / name).is_file()
    ]
    if missing:
        raise ModelError(
            f"{folder.name} is not an OpenVINO IR model folder (missing {', '.join(missing)})"
        )
    config = read_json(folder / "config.json")
    context = _first_int(config, "max_position_embeddings", "n_positions", "max_sequence_length")
    architectures = [str(a) for a in config.get("architectures") or []]
    generative = any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures)
    return ModelSpec(
        id=model_id,
        path=folder,
        format="ir",
        context_length=context,
        architecture=str(config.get("model_type")) if config.get("model_type") else None,
        is_demo=folder == demo_model_path().resolve(),
        task="embeddings" if architectures and not generative else "chat",
    )


def _gguf_spec(file: Path, model_id: str) -> ModelSpec:
    try:
        meta = read_metadata(file)
    except GGUFError as exc:
        raise ModelError(str(exc)) from exc
    arch = str(meta.get("general.architecture", "unknown"))
    if arch not in GGUF_ARCHITECTURES:
        raise ModelError(
            f"{file.name}: GGUF architecture '{arch}' is not supported "
            f"(supported: {', '.join(sorted(GGUF_ARCHITECTURES))})"
        )
    file_type = meta.get("general.file_type")
    if file_type is not None and int(file_type) not in GGUF_FILE_TYPES:
        raise ModelError(
            f"{file.name}: GGUF quantization type {file_type} is not supported "
            f"(supported: {', '.join(sorted(set(GGUF_FILE_TYPES.values())))})"
        )
    context = meta.get(f"{arch}.context_length")
    return ModelSpec(
        id=model_id,
        path=file,
        format="gguf",
        context_length=int(context) if context else None,
        architecture=arch,
    )


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; ``{}`` when missing or unreadable (model folders vary)."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        logger.warning("cannot read %s", path)
        return {}
    return data if isinstance(data, dict) else {}


def read_chat_template(folder: Path) -> str | None:
    """The chat template an IR folder ships, wherever optimum or transformers put it."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8", errors="replace")
    for name in ("chat_template.json", "tokenizer_config.json"):
        value = read_json(folder / name).get("chat_template")
        if isinstance(value, str):
            return value
        if isinstance(value, list):  # named templates: [{"name": ..., "template": ...}]
            return "\n".join(str(t.get("template", "")) for t in value if isinstance(t, dict))
    return None


def _first_int(config: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None
