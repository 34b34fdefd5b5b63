"""Conversion child process: export a transformers model to OpenVINO IR with optimum-intel.

Run by :mod:`engine.store.convert` as ``PYTHON convert_child.py REQUEST_JSON``, where PYTHON
is the interpreter that has ``sidelight[convert]`` (torch, optimum-intel, nncf,
openvino-tokenizers). This file imports only the standard library at module level so that
any such interpreter can run it by path, with or without Sidelight installed.

It speaks to the parent through stdout lines starting with ``@@sidelight `` followed by JSON:
``{"phase": ...}`` as it goes, ``{"error": ..., "missing": ...}`` when the tools are not
installed (exit code 3), and ``{"phase": "done"}`` at the end. Everything else it prints
(optimum, nncf, transformers logs) is kept by the parent in a log for error messages.

``PYTHON convert_child.py --check`` only looks for the tools, without importing them (torch
takes seconds to import): ``{"missing": [...]}``, exit code 3 when some are missing.
"""

from __future__ import annotations

import os
import sys

# Run by path, Python puts this folder first on sys.path, where Sidelight's own modules
# would shadow the standard library and third-party packages for everything imported below.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

import importlib
import importlib.util
import json
from typing import Any

PREFIX = "@@sidelight "
EXIT_MISSING_TOOLS = 3
TOOLS = ("torch", "transformers", "optimum.intel", "nncf", "openvino_tokenizers")


def say(**message: Any) -> None:
    sys.stdout.write(PREFIX + json.dumps(message) + "\n")
    sys.stdout.flush()


# Weight-compression arguments per target, from bench/matrix.py (decode speed) and
# bench/quality.py (accuracy); figures in docs/benchmarks.md.
# CPU and GPU: int4 asymmetric, group 128, every layer (embeddings and head too): decoded
# 1.06-1.4x faster than optimum's default (head and embeddings int8) at the 0.5B shape and
# the same at 1.5B; asymmetric int4 kept the accuracy that symmetric and channel-wise int4
# lost on the trained test models (channel-wise sym is faster still, but not at that cost).
CPU_INT4_RECIPE = ("--group-size", "128", "--ratio", "1.0", "--all-layers")
# NPU: symmetric, channel-wise (no groups), every layer compressed: what its compiler wants.
NPU_INT4_RECIPE = ("--sym", "--group-size", "-1", "--ratio", "1.0")


def recipe_args(weights: str, npu: bool) -> list[str]:
    """The compression arguments for ``weights`` on the target device (none for fp16)."""
    if weights == "int4":
        return list(NPU_INT4_RECIPE if npu else CPU_INT4_RECIPE)
    if weights == "int8" and npu:
        return ["--sym", "--group-size", "-1", "--ratio", "1.0"]
    return []


# The HiFi-GAN vocoder every SpeechT5 text-to-speech checkpoint is used with.
SPEECHT5_VOCODER = "microsoft/speecht5_hifigan"


def optimum_argv(request: dict[str, Any]) -> list[str]:
    """The ``optimum-cli export openvino`` arguments for a request (int4/int8/fp16, NPU)."""
    argv = ["optimum-cli", "export", "openvino", "--model", request["source"]]
    if request.get("revision") and request["revision"] != "main":
        argv += ["--revision", request["revision"]]
    if request.get("task"):
        argv += ["--task", request["task"]]
    if request.get("task") == "text-to-audio":  # SpeechT5 speaks through a separate vocoder
        argv += ["--model-kwargs", json.dumps({"vocoder": SPEECHT5_VOCODER})]
    weights = request.get("weights", "int4")
    argv += ["--weight-format", weights]
    argv += recipe_args(weights, bool(request.get("npu")))
    if request.get("trust_remote_code"):
        argv.append("--trust-remote-code")
    argv.append(request["output"])
    return argv


def missing_tools() -> list[str]:
    """The conversion modules this interpreter cannot find (without importing them)."""
    missing = []
    for module in TOOLS:
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:  # the parent package ("optimum" of "optimum.intel") is missing
            found = False
        if not found:
            missing.append(module)
    return missing


def main() -> int:
    # OpenVINO, nncf and optimum-intel send usage telemetry and write a client id to ~/intel
    # unless the user declined; unimportable, they use no-op stubs (engine/telemetry.py).
    sys.modules.setdefault("openvino_telemetry", None)  # type: ignore[arg-type]
    if sys.argv[1:] == ["--check"]:
        missing = missing_tools()
        say(missing=missing)
        return EXIT_MISSING_TOOLS if missing else 0
    request = json.loads(sys.argv[1])
    say(phase="checking", message="loading the conversion tools")
    for module in TOOLS:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            say(error=f"{module} is not installed: {exc}", missing=module)
            return EXIT_MISSING_TOOLS
    from optimum.commands.optimum_cli import main as optimum_main

    say(phase="converting", message="exporting and compressing weights")
    sys.argv = optimum_argv(request)
    optimum_main()
    say(phase="done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
