"""``sidelight export-ovms`` (engine/ovms_export.py): the files it writes, checked against
OpenVINO Model Server 2026.3's own definitions.

OVMS itself cannot run here (no container runtime, no OVMS build on this machine), so
the export is validated against what OVMS documents and enforces: ``config.json`` against
the config JSON schema of its ``src/schema.cpp`` (tests/fixtures/ovms/config_schema.json),
each ``graph.pbtxt``'s node options against the fields, types and enums of its calculator
``.proto`` files (tests/fixtures/ovms/calculator_options.json), the graph's frame against
``demos/common/export_models/export_model.py``'s templates, and the Kubernetes manifest's
shape. Pure file checks on the tiny fixture models; no inference.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.models import spec_from_path
from engine.ovms_export import (
    OVMS_IMAGE,
    OVMS_VERSION,
    ExportError,
    ServingOptions,
    export_ovms,
)
from tests.schema_check import conforms

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SCHEMA = json.loads((FIXTURES / "ovms" / "config_schema.json").read_text())
OPTIONS = json.loads((FIXTURES / "ovms" / "calculator_options.json").read_text())
_FIELD = re.compile(r"^\s*([a-z_0-9]+):\s*(.+?),?\s*$")


def node_options(graph: str) -> tuple[str, str, dict[str, str]]:
    """(calculator, options message, {field: raw value}) of the graph's one node."""
    calculator = re.search(r'calculator: "(\w+)"', graph)
    block = re.search(
        r"\[type\.googleapis\.com / mediapipe\.(\w+)\]: \{\n(.*?)\n\s*\}", graph, re.S
    )
    assert calculator and block, graph
    fields = {}
    for line in block.group(2).splitlines():
        match = _FIELD.match(line)
        assert match, f"not a field: {line!r}"
        fields[match.group(1)] = match.group(2)
    return calculator.group(1), block.group(1), fields


def check_against_proto(graph: str) -> dict[str, str]:
    """Every option is a field of the calculator's options message, with a value of its
    type; the required ones are there. Returns the options."""
    calculator, message, fields = node_options(graph)
    schema = OPTIONS[message]
    assert calculator == schema["calculator"]
    assert set(schema["required"]) <= set(fields)
    for name, raw in fields.items():
        kind = schema["fields"].get(name)
        assert kind is not None, f"{message} has no field {name}"
        if isinstance(kind, list):
            assert raw in kind, (name, raw)
        elif kind == "string":
            assert re.fullmatch(r'"[^"]*"|\'[^\']*\'', raw), (name, raw)
        elif kind == "bool":
            assert raw in ("true", "false"), (name, raw)
        else:
            assert raw.isdigit() and int(raw) < 2 ** (32 if kind == "uint32" else 64), (name, raw)
    return fields


def test_a_chat_model_exports_an_llm_graph_with_sidelights_settings(tmp_path: Path) -> None:
    spec = spec_from_path(FIXTURES / "tiny-coder")
    options = ServingOptions(device="cpu", kv_cache_gb=1.5, kv_cache_precision="u8")
    done = export_ovms(spec, tmp_path / "repo", options)
    graph = (done.model_dir / "graph.pbtxt").read_text()
    fields = check_against_proto(graph)
    assert fields["models_path"] == '"./"'
    assert fields["device"] == '"CPU"'
    assert fields["cache_size"] == "2"  # whole GB, rounded up from 1.5
    assert fields["enable_prefix_caching"] == "true"
    assert json.loads(fields["plugin_config"].strip("'")) == {"KV_CACHE_PRECISION": "u8"}
    assert int(fields["max_tokens_limit"]) == spec.context_length
    assert fields["tool_parser"].strip('"') in OPTIONS["tool_parsers"]
    # The frame is export_model.py's text-generation template.
    for line in (
        'input_stream: "HTTP_REQUEST_PAYLOAD:input"',
        'output_stream: "HTTP_RESPONSE_PAYLOAD:output"',
        'input_side_packet: "LLM_NODE_RESOURCES:llm"',
        'input_side_packet: "LLM_NODE_EXECUTION_CONTEXTS:llm_ctx"',
        'input_stream_handler: "SyncSetInputStreamHandler",',
    ):
        assert line in graph
    assert graph.startswith("# OVMS_GRAPH_QUEUE_MAX_SIZE: AUTO\n")
    assert graph.count("{") == graph.count("}")
    assert (done.model_dir / "openvino_model.xml").is_file()
    assert not (done.model_dir / "manifest.json").exists()
    same_fs = os.stat(spec.path).st_dev == os.stat(tmp_path).st_dev
    assert done.linked == same_fs
    if same_fs:
        assert os.path.samefile(
            done.model_dir / "openvino_model.bin", spec.path / "openvino_model.bin"
        )


def test_npu_gets_its_prompt_length_in_the_plugin_config(tmp_path: Path) -> None:
    spec = spec_from_path(FIXTURES / "tiny-coder")
    done = export_ovms(spec, tmp_path, ServingOptions(device="NPU", npu_max_prompt_len=2048))
    fields = check_against_proto((done.model_dir / "graph.pbtxt").read_text())
    assert json.loads(fields["plugin_config"].strip("'")) == {
        "DEVICE_PROPERTIES": {"NPU": {"MAX_PROMPT_LEN": 2048}}
    }


def test_encoders_export_their_own_calculators(tmp_path: Path) -> None:
    embed = export_ovms(spec_from_path(FIXTURES / "tiny-embed"), tmp_path, ServingOptions())
    rerank = export_ovms(spec_from_path(FIXTURES / "tiny-rerank"), tmp_path, ServingOptions())
    assert (embed.task, rerank.task) == ("embeddings", "rerank")
    fields = check_against_proto((embed.model_dir / "graph.pbtxt").read_text())
    assert fields["normalize_embeddings"] == "true"  # as Sidelight's worker embeds
    pooling = json.loads((FIXTURES / "tiny-embed" / "1_Pooling" / "config.json").read_text())
    assert fields["pooling"] == ("MEAN" if pooling.get("pooling_mode_mean_tokens") else "CLS")
    check_against_proto((rerank.model_dir / "graph.pbtxt").read_text())


def test_the_config_lists_every_export_once_and_matches_ovms_schema(tmp_path: Path) -> None:
    for fixture in ("tiny-coder", "tiny-embed", "tiny-coder"):
        export_ovms(spec_from_path(FIXTURES / fixture), tmp_path, ServingOptions())
    config: dict[str, Any] = json.loads((tmp_path / "config.json").read_text())
    assert conforms(SCHEMA, config)
    assert config["model_config_list"] == [
        {"config": {"name": "tiny-coder", "base_path": "tiny-coder"}},
        {"config": {"name": "tiny-embed", "base_path": "tiny-embed"}},
    ]
    assert not conforms(SCHEMA, {"model_config_list": [{"config": {"nam": "x"}}]})


def test_the_kubernetes_manifest_runs_the_official_image_on_the_repository(
    tmp_path: Path,
) -> None:
    done = export_ovms(spec_from_path(FIXTURES / "tiny-coder"), tmp_path, ServingOptions())
    deployment, service = yaml.safe_load_all(done.manifest.read_text())
    assert (deployment["kind"], service["kind"]) == ("Deployment", "Service")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == OVMS_IMAGE == f"openvino/model_server:{OVMS_VERSION}"
    assert container["args"] == ["--rest_port", "8000", "--config_path", "/models/config.json"]
    assert container["volumeMounts"][0]["mountPath"] == "/models"
    assert pod["volumes"][0]["name"] == container["volumeMounts"][0]["name"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"] == labels == service["spec"]["selector"]
    assert service["spec"]["ports"][0]["targetPort"] == 8000
    assert f"-v {tmp_path}:/models:ro {OVMS_IMAGE}" in done.docker_run
    assert done.docker_run in done.script.read_text()


def test_what_cannot_be_exported_is_refused(tmp_path: Path) -> None:
    gguf = spec_from_path(FIXTURES / "tiny-coder-f16.gguf")
    with pytest.raises(ExportError, match="--save-ir"):
        export_ovms(gguf, tmp_path, ServingOptions())
    with pytest.raises(ExportError, match="name"):
        export_ovms(spec_from_path(FIXTURES / "tiny-coder"), tmp_path, ServingOptions(), "a b")
    (tmp_path / "taken").mkdir()
    with pytest.raises(ExportError, match="no earlier export"):
        export_ovms(spec_from_path(FIXTURES / "tiny-coder"), tmp_path, ServingOptions(), "taken")


def test_the_command_prints_the_recipe(tmp_path: Path) -> None:
    env = {**os.environ, "SIDELIGHT_HOME": str(tmp_path / "home")}
    result = subprocess.run(
        [sys.executable, "-m", "engine.cli", "export-ovms", str(FIXTURES / "tiny-coder"),
         str(tmp_path / "repo")],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "docker run" in result.stdout and "sidelight remote add" in result.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "engine.cli", "export-ovms", "no-such-model", str(tmp_path / "x")],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert missing.returncode == 2 and "no-such-model" in missing.stderr
