"""Shared helpers for the benchmark scripts: cache layout, logging, subprocess, statistics.

The cache folder defaults to ``~/.cache/sidelight-bench`` and can be moved with ``--cache``
on every script or the ``SIDELIGHT_BENCH_CACHE`` environment variable. Everything large the
scripts make (the llama.cpp source and build, the random-weight bench model in its three
formats) lives there so the repository stays small.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import logging
import os
import resource
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    def llama_build_dir_noamx(self) -> Path:
        """The build with AMX compiled out (``bench.build_llama_cpp --no-amx``): on a CPU
        whose AMX kernels crash, it runs llama.cpp's default repacked path."""
        return self.root / "llama.cpp-build-noamx"

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

    def llama_binary(self, name: str, no_amx: bool = False) -> Path:
        """Return the path of a built llama.cpp tool such as ``llama-bench`` (``no_amx``:
        from the build with AMX compiled out)."""
        build_dir = self.llama_build_dir_noamx if no_amx else self.llama_build_dir
        return build_dir / "bin" / name


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--cache`` and ``-v`` to a script's argument parser."""
    parser.add_argument(
        "--cache",
        type=Path,
        default=DEFAULT_CACHE,
        help=f"cache folder for large artefacts (default: {DEFAULT_CACHE})",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def add_no_amx_arg(parser: argparse.ArgumentParser, tool: str) -> None:
    """Add ``--no-amx``: run ``tool`` from the llama.cpp build with AMX compiled out
    (``bench.build_llama_cpp --no-amx``), for CPUs whose AMX kernels crash."""
    parser.add_argument(
        "--no-amx",
        action="store_true",
        help=f"{tool} of the build with AMX compiled out (bench.build_llama_cpp --no-amx)",
    )


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
    """Run a command, logging it first; raise ``CalledProcessError`` on failure.

    The child's stdout goes to our stderr, so a script's stdout holds only its result table.
    """
    args = [os.fspath(c) for c in cmd]
    logger.info("$ %s", shlex.join(args))
    subprocess.run(args, cwd=cwd, env=env, check=True, stdout=sys.stderr)


def median(values: Sequence[float]) -> float:
    """Median of a non-empty sequence (``nan`` when empty, so tables still print)."""
    return statistics.median(values) if values else float("nan")


# --- the machine ---------------------------------------------------------------------------
# Figures move with the CPU's vector extensions, not only its speed: OpenVINO's CPU plugin
# infers in bf16 by default where the CPU has AVX-512 bf16 or AMX, and its int8 path for
# int4/int8 weights (dynamic quantization) needs VNNI and f32 activations. So every table
# says which of these the machine had.

ISA_FLAGS = ("avx2", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")


def cpu_summary() -> str:
    """One line: the CPU's name, cores, the ISA flags above it has, and OpenVINO's default
    inference precision on it (imports OpenVINO; call once per run)."""
    import openvino as ov

    flags: set[str] = set()
    name = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "flags" and not flags:
                flags = set(value.split())
            elif key.strip() == "model name" and name == "unknown CPU":
                name = value.strip()
    core = ov.Core()
    precision = core.get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()
    has = [f for f in ISA_FLAGS if f in flags]
    lacks = [f for f in ISA_FLAGS if f not in flags]
    vnni = any(f in flags for f in ("avx_vnni", "avx512_vnni"))
    dq = "available" if vnni and precision == "f32" else "not used"
    return (
        f"{name}, {os.cpu_count()} logical cores; has {' '.join(has) or '-'}; "
        f"lacks {' '.join(lacks) or '-'}; OpenVINO {ov.get_version()} infers in "
        f"{precision} by default; int8 dynamic quantization of int4 weights: {dq}"
    )


# --- background load -------------------------------------------------------------------------
# Benchmarks here share a 2-core machine with builds and test runs; a figure taken while
# something else held a core is not a figure. These helpers measure how much CPU *other*
# processes used during a measurement, so noisy repetitions can be shown or dropped.


def _machine_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


def _process_jiffies(pid: int) -> int:
    """utime + stime of a process (all its threads), or 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            after_name = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(after_name[11]) + int(after_name[12])  # fields 14 and 15 of proc(5)


class CpuMeter:
    """Share of the machine's CPU time used by processes other than ``pids`` over an interval.

    ``pids`` defaults to this process; ``child_rusage=True`` also counts terminated children
    (for a benchmark binary run with ``subprocess.run``). Returns ``nan`` off Linux.
    """

    def __init__(self, pids: Sequence[int] = (), child_rusage: bool = False) -> None:
        self.pids = list(pids) or [os.getpid()]
        self.child_rusage = child_rusage
        self._start: tuple[int, int, float] | None = None

    def _own(self) -> float:
        own = float(sum(_process_jiffies(pid) for pid in self.pids))
        if self.child_rusage:
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            own += (usage.ru_utime + usage.ru_stime) * os.sysconf("SC_CLK_TCK")
        return own

    def start(self) -> None:
        if not os.path.exists("/proc/stat"):
            return
        busy, total = _machine_jiffies()
        self._start = (busy, total, self._own())

    def stop(self) -> float:
        if self._start is None:
            return float("nan")
        busy, total = _machine_jiffies()
        own = self._own()
        d_busy, d_total, d_own = (
            busy - self._start[0],
            total - self._start[1],
            own - self._start[2],
        )
        self._start = None
        return max(0.0, (d_busy - d_own) / d_total) if d_total > 0 else float("nan")


def wait_for_quiet(threshold: float, window_s: float = 2.0, timeout_s: float = 180.0) -> float:
    """Wait until other processes use at most ``threshold`` of the CPUs; return the last share.

    Gives up (with a warning) after ``timeout_s``, so a busy machine slows a run but never
    hangs it.
    """
    deadline = time.monotonic() + timeout_s
    next_log = 0.0
    while True:
        meter = CpuMeter()
        meter.start()
        time.sleep(window_s)
        share = meter.stop()
        if not share > threshold:  # also true for nan: no /proc, nothing to wait for
            return share
        now = time.monotonic()
        if now > deadline:
            logger.warning(
                "machine still busy (others use %.0f%% CPU); measuring anyway", share * 100
            )
            return share
        if now >= next_log:
            logger.info("waiting for a quiet machine (others use %.0f%% CPU)", share * 100)
            next_log = now + 30


def wait_healthy(
    port: int, proc: subprocess.Popen[bytes], timeout_s: float, name: str = "server"
) -> None:
    """Poll ``http://127.0.0.1:PORT/health`` until it answers 200 (Sidelight and llama-server).

    Raises:
        RuntimeError: ``proc`` exited first.
        TimeoutError: no 200 within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}")
        with contextlib.suppress(OSError):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            try:
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    return
            finally:
                conn.close()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} did not become healthy")
        time.sleep(0.2)


@contextlib.contextmanager
def healthy_server(
    cmd: Sequence[str],
    port: int,
    timeout_s: float,
    name: str = "server",
    env: Mapping[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``cmd`` (output discarded) and yield it once ``/health`` on ``port`` answers 200;
    terminate it afterwards (killed if it does not exit within 15 s)."""
    logger.info("$ %s", " ".join(cmd))
    full_env = None if env is None else {**os.environ, **env}
    proc = subprocess.Popen(
        list(cmd), env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_healthy(port, proc, timeout_s, name)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def sse_chunks(response: Any) -> Iterator[dict[str, Any]]:
    """The JSON chunks of an OpenAI-style server-sent event stream (``data: [DONE]`` ends it)."""
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[6:])


def free_port() -> int:
    """A loopback TCP port free right now (for a server a benchmark starts)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
