"""``sidelight export-ovms``: a stored model (or an IR folder) as an OpenVINO Model Server
model repository, ready for ``docker run`` or Kubernetes.

What is written in ``DIR``::

    DIR/<name>/            the IR files (hard links when DIR is on the model's filesystem,
                           else copies) and graph.pbtxt, the MediaPipe graph OVMS serves
    DIR/config.json        OVMS's config, listing the model (merged into one already there)
    DIR/kubernetes.yaml    a Deployment and a Service on the official OVMS image, DIR mounted
    DIR/run-ovms.sh        the ``docker run`` line

The formats follow OVMS 2026.3 (:data:`OVMS_VERSION`), taken from its own sources:
``demos/common/export_models/export_model.py`` (the graph templates, and how a servable is
added to ``config.json``), ``src/llm/llm_calculator.proto``,
``src/embeddings/embeddings_calculator_ov.proto``, ``src/rerank/rerank_calculator_ov.proto``
(the node options) and ``src/schema.cpp`` (the config schema). ``config.json`` lists the
graph in ``model_config_list`` (``{"config": {"name", "base_path"}}``): OVMS 2026.3's
docs/mediapipe.md calls ``mediapipe_config_list`` deprecated, and export_model.py rewrites
that section into this one.

The graph carries the settings Sidelight serves the model with: the device, the KV cache
budget (``cache_size``, whole GB: OVMS takes an integer), prefix caching (on, as in
Sidelight's workers), the context as ``max_tokens_limit`` (OVMS sizes the context from the
KV cache; this bounds what a request may ask), an explicit KV cache precision, and the NPU's
prompt length; tool and reasoning parsers from the chat template when OVMS has one for it.

Plain file work; no OpenVINO import. Threading: none (the CLI's main thread).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.models import ModelError, ModelSpec, ModelTask, read_chat_template, read_json
from engine.parsing import (
    ReasoningFormat,
    ToolFormat,
    reasoning_format_for_template,
    template_supports_reasoning,
    tool_format_for_template,
)
from engine.store.manifest import MANIFEST

logger = logging.getLogger(__name__)

OVMS_VERSION = "2026.3"
OVMS_IMAGE = f"openvino/model_server:{OVMS_VERSION}"
OVMS_GPU_IMAGE = f"openvino/model_server:{OVMS_VERSION}-gpu"
OVMS_PORT = 8000
GRAPH_FILE = "graph.pbtxt"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

# Sidelight's tool syntax -> OVMS's tool_parser (export_model.py's --tool_parser choices).
_TOOL_PARSERS: dict[ToolFormat, str] = {
    ToolFormat.HERMES: "hermes3",
    ToolFormat.LLAMA3: "llama3",
    ToolFormat.MISTRAL: "mistral",
    ToolFormat.QWEN3_XML: "qwen3coder",
    ToolFormat.HARMONY: "gptoss",
    ToolFormat.GEMMA4: "gemma4",
}
_REASONING_PARSERS: dict[ReasoningFormat, str] = {
    ReasoningFormat.THINK: "qwen3",
    ReasoningFormat.HARMONY: "gptoss",
}


class ExportError(ValueError):
    """The model cannot be exported (a GGUF, a bad name, a folder in the way)."""


@dataclass(frozen=True)
class ServingOptions:
    """What the graph is written with (Sidelight's settings for the model)."""

    device: str = "CPU"
    kv_cache_gb: float = 1.0
    kv_cache_precision: str | None = None
    npu_max_prompt_len: int = 4096


@dataclass(frozen=True)
class Export:
    """What was written: the model's folder, and the files beside it."""

    name: str
    task: ModelTask
    model_dir: Path
    config: Path
    manifest: Path
    script: Path
    linked: bool  # hard links (else copies)
    docker_run: str


def export_ovms(
    spec: ModelSpec, out: Path, options: ServingOptions, name: str | None = None
) -> Export:
    """Write an OVMS model repository for ``spec`` in ``out`` (see the module docstring).

    Raises:
        ExportError: a GGUF model, a name OVMS cannot take, or ``out/<name>`` already
            holding something else than an earlier export of it.
        OSError: the files cannot be written.
    """
    if spec.format != "ir":
        raise ExportError(
            f"{spec.id} is a {spec.format} model; OVMS serves OpenVINO IR here: "
            "`sidelight import FILE --save-ir` stores an IR beside a GGUF"
        )
    name = name or spec.id
    if not _NAME.fullmatch(name):
        raise ExportError(f"the OVMS model name {name!r} must be [A-Za-z0-9._-], 1-128 long")
    out = out.expanduser().resolve()
    target = out / name
    if target.exists() and not (target / GRAPH_FILE).is_file():
        raise ExportError(f"{target} exists and is no earlier export; pick another DIR")
    out.mkdir(parents=True, exist_ok=True)
    linked = _place_files(spec.path, target)
    (target / GRAPH_FILE).write_text(graph(spec, options), encoding="utf-8")
    config = out / "config.json"
    _add_to_config(config, name)
    run = docker_run(out, options.device)
    manifest = out / "kubernetes.yaml"
    manifest.write_text(kubernetes_manifest(name, options.device), encoding="utf-8")
    script = out / "run-ovms.sh"
    script.write_text(f"#!/bin/sh\n# OpenVINO Model Server {OVMS_VERSION}\n{run}\n", "utf-8")
    script.chmod(0o755)
    return Export(name, spec.task, target, config, manifest, script, linked, run)


def _place_files(source: Path, target: Path) -> bool:
    """Hard-link (same filesystem) or copy every file of ``source`` into ``target``."""
    linked = True
    for path in sorted(source.rglob("*")):
        if not path.is_file() or path.name in (GRAPH_FILE, MANIFEST):
            continue
        dest = target / path.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            dest.unlink()
        try:
            os.link(path, dest)
        except OSError:
            shutil.copy2(path, dest)
            linked = False
    return linked


def graph(spec: ModelSpec, options: ServingOptions) -> str:
    """The ``graph.pbtxt`` for ``spec``'s task (OVMS 2026.3's templates)."""
    if spec.task == "embeddings":
        return _EMBEDDINGS_GRAPH.format(
            pooling=_pooling(spec.path), device=_quote(_device(options.device))
        )
    if spec.task == "rerank":
        return _RERANK_GRAPH.format(device=_quote(_device(options.device)))
    return _llm_graph(spec, options)


def _llm_graph(spec: ModelSpec, options: ServingOptions) -> str:
    device = _device(options.device)
    plugin: dict[str, Any] = {}
    if options.kv_cache_precision and device == "CPU":
        plugin["KV_CACHE_PRECISION"] = options.kv_cache_precision
    if device == "NPU":
        plugin["DEVICE_PROPERTIES"] = {"NPU": {"MAX_PROMPT_LEN": options.npu_max_prompt_len}}
    lines = [
        f"models_path: {_quote('./')},",
        f"plugin_config: '{json.dumps(plugin)}',",
        "enable_prefix_caching: true,",
        f"cache_size: {max(1, math.ceil(options.kv_cache_gb))},",
        "max_num_seqs: 256,",
        f"device: {_quote(device)},",
    ]
    context = spec.context_length or _context(spec.path)
    if context:
        lines.append(f"max_tokens_limit: {context},")
    template = read_chat_template(spec.path)
    tool = _TOOL_PARSERS.get(tool_format_for_template(template)) if template else None
    if tool:
        lines.append(f"tool_parser: {_quote(tool)},")
    if template and template_supports_reasoning(template):
        reasoning = _REASONING_PARSERS.get(reasoning_format_for_template(template))
        if reasoning:
            lines.append(f"reasoning_parser: {_quote(reasoning)},")
    lines[-1] = lines[-1].rstrip(",")
    options_text = "\n".join(f"          {line}" for line in lines)
    return _LLM_GRAPH.replace("{options}", options_text)


def _device(device: str) -> str:
    """OVMS's device name (``GPU.1`` stays; ``AUTO`` too)."""
    return device.strip().upper() or "CPU"


def _quote(text: str) -> str:
    return json.dumps(text)  # a protobuf text-format string (ASCII: json's escapes hold)


def _context(folder: Path) -> int | None:
    config = read_json(folder / "config.json")
    for key in ("max_position_embeddings", "n_positions"):
        value = config.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _pooling(folder: Path) -> str:
    """The pooling the model declares, as Sidelight's worker reads it (CLS by default)."""
    config = read_json(folder / "1_Pooling" / "config.json")
    if config.get("pooling_mode_mean_tokens"):
        return "MEAN"
    if config.get("pooling_mode_lasttoken"):
        return "LAST"
    return "CLS"


def _add_to_config(path: Path, name: str) -> None:
    """Add (or update) ``name`` in OVMS's ``config.json``, as export_model.py does."""
    data: dict[str, Any] = {"model_config_list": []}
    if path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ExportError(f"{path} is not JSON ({exc}); move it away first") from exc
        if not isinstance(data, dict) or not isinstance(data.get("model_config_list"), list):
            raise ExportError(f"{path} is not an OVMS config (no model_config_list)")
    entries = data["model_config_list"]
    entry = {"config": {"name": name, "base_path": name}}
    for i, item in enumerate(entries):
        if isinstance(item, dict) and item.get("config", {}).get("name") == name:
            entries[i] = entry
            break
    else:
        entries.append(entry)
    path.write_text(json.dumps(data, indent=4) + "\n", encoding="utf-8")


def docker_run(out: Path, device: str) -> str:
    """The ``docker run`` line serving ``out`` on port 8000 (the GPU image and its device
    for a GPU; OVMS's docs pass ``/dev/dri`` and the render group)."""
    gpu = _device(device).startswith("GPU")
    image = OVMS_GPU_IMAGE if gpu else OVMS_IMAGE
    devices = '--device /dev/dri --group-add=$(stat -c "%g" /dev/dri/render* | head -n 1) '
    return (
        f"docker run -d --rm -p {OVMS_PORT}:{OVMS_PORT} {devices if gpu else ''}"
        f"-v {out}:/models:ro {image} --rest_port {OVMS_PORT} --config_path /models/config.json"
    )


def kubernetes_manifest(name: str, device: str) -> str:
    """A Deployment (one OVMS replica, the repository from a PersistentVolumeClaim named
    ``sidelight-models`` at ``/models``) and a Service on port 8000."""
    gpu = _device(device).startswith("GPU")
    image = OVMS_GPU_IMAGE if gpu else OVMS_IMAGE
    app = f"ovms-{name.lower().replace('.', '-').replace('_', '-')}"[:63].rstrip("-")
    limits = '            gpu.intel.com/i915: "1"\n' if gpu else ""
    return _MANIFEST.format(app=app, image=image, port=OVMS_PORT, limits=limits)


def spec_for_export(spec: ModelSpec) -> ModelSpec:
    """``spec`` checked for export (an IR folder with its model file).

    Raises:
        ModelError: the folder lacks ``openvino_model.xml``.
    """
    if spec.format == "ir" and not (spec.path / "openvino_model.xml").is_file():
        raise ModelError(f"{spec.path} has no openvino_model.xml")
    return spec


_LLM_GRAPH = """# OVMS_GRAPH_QUEUE_MAX_SIZE: AUTO
input_stream: "HTTP_REQUEST_PAYLOAD:input"
output_stream: "HTTP_RESPONSE_PAYLOAD:output"

node: {
  name: "LLMExecutor"
  calculator: "HttpLLMCalculator"
  input_stream: "LOOPBACK:loopback"
  input_stream: "HTTP_REQUEST_PAYLOAD:input"
  input_side_packet: "LLM_NODE_RESOURCES:llm"
  input_side_packet: "LLM_NODE_EXECUTION_CONTEXTS:llm_ctx"
  output_stream: "LOOPBACK:loopback"
  output_stream: "HTTP_RESPONSE_PAYLOAD:output"
  input_stream_info: {
    tag_index: 'LOOPBACK:0',
    back_edge: true
  }
  node_options: {
      [type.googleapis.com / mediapipe.LLMCalculatorOptions]: {
{options}
      }
  }
  input_stream_handler {
    input_stream_handler: "SyncSetInputStreamHandler",
    options {
      [mediapipe.SyncSetInputStreamHandlerOptions.ext] {
        sync_set {
          tag_index: "LOOPBACK:0"
        }
      }
    }
  }
}
"""

_EMBEDDINGS_GRAPH = """# OVMS_GRAPH_QUEUE_MAX_SIZE: AUTO
input_stream: "REQUEST_PAYLOAD:input"
output_stream: "RESPONSE_PAYLOAD:output"
node {{
  name: "EmbeddingsExecutor"
  input_side_packet: "EMBEDDINGS_NODE_RESOURCES:embeddings_servable"
  calculator: "EmbeddingsCalculatorOV"
  input_stream: "REQUEST_PAYLOAD:input"
  output_stream: "RESPONSE_PAYLOAD:output"
  node_options: {{
    [type.googleapis.com / mediapipe.EmbeddingsCalculatorOVOptions]: {{
      models_path: "./",
      plugin_config: '{{"NUM_STREAMS": "1" }}',
      normalize_embeddings: true,
      pooling: {pooling},
      target_device: {device}
    }}
  }}
}}
"""

_RERANK_GRAPH = """# OVMS_GRAPH_QUEUE_MAX_SIZE: AUTO
input_stream: "REQUEST_PAYLOAD:input"
output_stream: "RESPONSE_PAYLOAD:output"
node {{
  name: "RerankExecutor"
  input_side_packet: "RERANK_NODE_RESOURCES:rerank_servable"
  calculator: "RerankCalculatorOV"
  input_stream: "REQUEST_PAYLOAD:input"
  output_stream: "RESPONSE_PAYLOAD:output"
  node_options: {{
    [type.googleapis.com / mediapipe.RerankCalculatorOVOptions]: {{
      models_path: "./",
      plugin_config: '{{"NUM_STREAMS": "1" }}',
      target_device: {device}
    }}
  }}
}}
"""

_MANIFEST = """# OpenVINO Model Server: the repository written by `sidelight export-ovms`, copied into
# the PersistentVolumeClaim "sidelight-models" (config.json at its root).
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {app}
  labels:
    app: {app}
spec:
  replicas: 1
  selector:
    matchLabels:
      app: {app}
  template:
    metadata:
      labels:
        app: {app}
    spec:
      containers:
        - name: ovms
          image: {image}
          args: ["--rest_port", "{port}", "--config_path", "/models/config.json"]
          ports:
            - containerPort: {port}
              name: http
          readinessProbe:
            httpGet:
              path: /v2/health/ready
              port: {port}
            periodSeconds: 10
          resources:
            limits:
{limits}              memory: "16Gi"
          volumeMounts:
            - name: models
              mountPath: /models
              readOnly: true
      volumes:
        - name: models
          persistentVolumeClaim:
            claimName: sidelight-models
---
apiVersion: v1
kind: Service
metadata:
  name: {app}
spec:
  selector:
    app: {app}
  ports:
    - name: http
      port: {port}
      targetPort: {port}
"""
