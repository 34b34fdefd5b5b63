"""Shared helpers for the benchmark scripts: cache layout, logging, subprocess, statistics.

The cache folder defaults to ``~/.cache/sidelight-bench`` and can be moved with ``--cache``
on every script or the ``SIDELIGHT_BENCH_CACHE`` environment variable. Everything large the
scripts make (the llama.cpp source and build, the random-weight bench model in its three
formats) lives there so the repository stays small.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import statistics
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

DEFAULT_CACHE = Path(
    os.environ.get("SIDELIGHT_BENCH_CACHE", "~/.cache/sidelight-bench")
).expanduser()
BENCH_MODEL_NAME = "qwen2.5-0.5b-shape-random"


@dataclass(frozen=True)
class CacheLayout:
    """Where each artefact lives inside the cache folder."""

    root: Path

    @property
    def sdist_dir(self) -> Path:
        return self.root / "sdist"

    @property
    def src_root(self) -> Path:
        """Folder the llama-cpp-python sdist is extracted into (one sub-folder per version)."""
        return self.root / "src"

    @property
    def llama_build_dir(self) -> Path:
        return self.root / "llama.cpp-build"

    @property
    def model_dir(self) -> Path:
        return self.root / "models" / BENCH_MODEL_NAME

    @property
    def hf_dir(self) -> Path:
        return self.model_dir / "hf"

    @property
    def ov_dir(self) -> Path:
        return self.model_dir / "ov-int4"

    @property
    def gguf_f16(self) -> Path:
        return self.model_dir / "gguf" / "model-f16.gguf"

    @property
    def gguf_q4_0(self) -> Path:
        return self.model_dir / "gguf" / "model-q4_0.gguf"

    def llama_cpp_source(self) -> Path:
        """Return the extracted ``vendor/llama.cpp`` folder (newest extracted sdist).

        Raises:
            FileNotFoundError: when ``bench.build_llama_cpp`` has not run yet.
        """
        candidates = sorted(self.src_root.glob("llama_cpp_python-*/vendor/llama.cpp"))
        if not candidates:
            raise FileNotFoundError(
                f"no llama.cpp source under {self.src_root}; run `python -m bench.build_llama_cpp` first"
            )
        return candidates[-1]

    def llama_binary(self, name: str) -> Path:
        """Return the path of a built llama.cpp tool such as ``llama-bench``."""
        return self.llama_build_dir / "bin" / name


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--cache`` and ``-v`` to a script's argument parser."""
    parser.add_argument(
        "--cache",
        type=Path,
        default=DEFAULT_CACHE,
        help=f"cache folder for large artefacts (default: {DEFAULT_CACHE})",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> None:
    """Run a command, logging it first; raise ``CalledProcessError`` on failure."""
    args = [os.fspath(c) for c in cmd]
    logger.info("$ %s", shlex.join(args))
    subprocess.run(args, cwd=cwd, env=env, check=True)


def median(values: Sequence[float]) -> float:
    """Median of a non-empty sequence (``nan`` when empty, so tables still print)."""
    return statistics.median(values) if values else float("nan")
