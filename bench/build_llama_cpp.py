"""Build llama.cpp from the llama-cpp-python source distribution, as a benchmark baseline.

Why: Sidelight's speed claims need a reference on the same machine and the same weights.
llama.cpp is that reference; its source (and a handful of real tokenizer vocabularies and
chat templates the bench model uses) ships inside the llama-cpp-python sdist on PyPI, which
is reachable here through pip. Nothing from that source is copied into this repository.

What: ``pip download`` the sdist into ``CACHE/sdist``, extract it into ``CACHE/src``, and
build ``vendor/llama.cpp`` with CMake into ``CACHE/llama.cpp-build`` (Release, CPU only,
``GGML_NATIVE``, no CURL/OpenSSL, no web UI download). Targets: ``llama-bench``,
``llama-quantize`` and, where this llama.cpp version has them, ``llama-server``,
``llama-cli``, ``llama-completion``. Every step is skipped when its output already exists.

``--no-amx`` builds a second copy into ``CACHE/llama.cpp-build-noamx`` with AMX compiled
out. Why: on a CPU with AMX (``amx_tile``/``amx_int8``), ``-march=native`` defines
``__AMX_INT8__``, and that macro (with ``__AVX512VNNI__``) is the only switch for ggml's AMX
code (``ggml-cpu/amx/``): its extra buffer type takes the Q4_0 weights at load and runs
their matrix products on AMX tiles. On this machine that path segfaults, so the native build
runs only with ``--no-repack`` (llama-bench: ``--repack 0``), which also turns off the
AVX-512 repacked Q4_0 kernels and leaves llama.cpp on its slower plain ones, making ratios
against it too flattering. The no-AMX build keeps ``GGML_NATIVE`` (the same
``-march=native``: AVX-512, VNNI, BF16, FP16, VBMI, and the native tuning) and adds
``-mno-amx-tile -mno-amx-int8 -mno-amx-bf16`` to the C and C++ flags. An explicit ``-mno-*``
wins over ``-march`` whatever their order (checked with GCC 12: CMake puts these flags
before ggml's ``-march=native``), so ``__AMX_*__`` stay undefined and the AMX code compiles
to nothing, while the repacked x86 kernels (``ggml-cpu/arch/x86/repack.cpp``) stay, and
llama.cpp runs its default repacked path without crashing. The other route,
``GGML_NATIVE=OFF`` with ``GGML_AVX512``/``GGML_AVX512_VNNI``/... on and ``GGML_AMX_*`` off,
would also drop what has no ggml option (AVX512-FP16, which ``simd-mappings.h`` uses, and
the native tuning), so it would differ from the native build in more than AMX. Measured here
(2 threads, ``llama-bench -p 512 -n 32`` on the bench model's Q4_0, quiet machine): the
native build with ``--repack 0`` pp512 197 t/s, tg32 28 t/s; the no-AMX build repacked pp512
~290 t/s, tg32 28 t/s; the native build repacked: segmentation fault.

Run (from the repository root; a build on 2 cores takes 10-20 minutes)::

    nice -n 10 .venv/bin/python -m bench.build_llama_cpp [--cache DIR] [--jobs N] [--no-amx]

The binary paths are printed on stdout, one ``name<TAB>path`` per line.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from bench.common import CacheLayout, add_common_args, run, setup_logging

logger = logging.getLogger(__name__)

REQUIRED_TARGETS = ("llama-bench", "llama-quantize")
OPTIONAL_TARGETS = ("llama-server", "llama-cli", "llama-completion")

CMAKE_OPTIONS = {
    "CMAKE_BUILD_TYPE": "Release",
    "GGML_NATIVE": "ON",
    "GGML_CUDA": "OFF",
    "GGML_VULKAN": "OFF",
    "GGML_METAL": "OFF",
    "GGML_BLAS": "OFF",
    "BUILD_SHARED_LIBS": "OFF",
    "LLAMA_CURL": "OFF",
    "LLAMA_OPENSSL": "OFF",
    "LLAMA_BUILD_TESTS": "OFF",
    "LLAMA_BUILD_EXAMPLES": "OFF",
    # The server's web UI is either built with npm or fetched prebuilt from a model hub;
    # neither is wanted (or reachable) for a benchmark, so both are off.
    "LLAMA_BUILD_UI": "OFF",
    "LLAMA_USE_PREBUILT_UI": "OFF",
}

# Added to CMAKE_OPTIONS by --no-amx (see the module docstring): the explicit -mno-* win
# over -march=native, so ggml's AMX code (guarded by __AMX_INT8__) compiles to nothing.
NO_AMX_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
NO_AMX_OPTIONS = {"CMAKE_C_FLAGS": NO_AMX_FLAGS, "CMAKE_CXX_FLAGS": NO_AMX_FLAGS}


def cmake_options(no_amx: bool = False) -> dict[str, str]:
    """The CMake ``-D`` options of the build (``no_amx``: AMX compiled out)."""
    return {**CMAKE_OPTIONS, **NO_AMX_OPTIONS} if no_amx else dict(CMAKE_OPTIONS)


def ensure_sdist(layout: CacheLayout, version: str | None) -> Path:
    """Return the llama-cpp-python sdist, downloading it with pip when absent."""
    pattern = f"llama_cpp_python-{version}.tar.gz" if version else "llama_cpp_python-*.tar.gz"
    found = sorted(layout.sdist_dir.glob(pattern), key=_version_key)
    if found:
        logger.info("sdist already downloaded: %s", found[-1])
        return found[-1]
    layout.sdist_dir.mkdir(parents=True, exist_ok=True)
    spec = f"llama-cpp-python=={version}" if version else "llama-cpp-python"
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            spec,
            "-d",
            layout.sdist_dir,
        ]
    )
    found = sorted(layout.sdist_dir.glob(pattern), key=_version_key)
    if not found:
        raise RuntimeError(f"pip download left no {pattern} in {layout.sdist_dir}")
    return found[-1]


def _version_key(path: Path) -> tuple[int, ...]:
    match = re.search(r"-(\d+(?:\.\d+)*)\.tar\.gz$", path.name)
    return tuple(int(p) for p in match.group(1).split(".")) if match else ()


def ensure_extracted(layout: CacheLayout, sdist: Path) -> Path:
    """Extract the sdist once; return its ``vendor/llama.cpp`` folder."""
    top = layout.src_root / sdist.name.removesuffix(".tar.gz")
    marker = top / ".extracted"
    if not marker.exists():
        if top.exists():
            shutil.rmtree(top)  # a half-finished extraction from an interrupted run
        layout.src_root.mkdir(parents=True, exist_ok=True)
        logger.info("extracting %s into %s", sdist.name, layout.src_root)
        with tarfile.open(sdist) as tar:
            tar.extractall(layout.src_root, filter="data")
        marker.touch()
    source = top / "vendor" / "llama.cpp"
    if not (source / "CMakeLists.txt").exists():
        raise RuntimeError(f"{sdist.name} has no vendor/llama.cpp/CMakeLists.txt")
    return source


def configure(source: Path, build_dir: Path, options: dict[str, str] | None = None) -> None:
    """Run the CMake configure step with ``options`` (default: ``CMAKE_OPTIONS``), starting
    afresh if the cache points at other sources."""
    cache_file = build_dir / "CMakeCache.txt"
    if cache_file.exists():
        home = re.search(
            r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", cache_file.read_text(), re.MULTILINE
        )
        if home and Path(home.group(1)).resolve() == source.resolve():
            return
        logger.info("build folder was configured for other sources; starting afresh")
        shutil.rmtree(build_dir)
    cmd: list[str | os.PathLike[str]] = ["cmake", "-S", source, "-B", build_dir]
    if shutil.which("ninja"):
        cmd += ["-G", "Ninja"]
    cmd += [f"-D{key}={value}" for key, value in (options or CMAKE_OPTIONS).items()]
    run(cmd)


def available_targets(build_dir: Path) -> set[str]:
    """Names of the build targets CMake generated (works for Ninja and Makefiles)."""
    out = subprocess.run(
        ["cmake", "--build", build_dir, "--target", "help"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return set(re.findall(r"(?:^|\s)(llama-[\w-]+)(?::|\s|$)", out))


def build(build_dir: Path, jobs: int) -> dict[str, Path]:
    """Build the wanted targets; return ``{name: binary path}`` of those built."""
    targets = available_targets(build_dir)
    missing = [t for t in REQUIRED_TARGETS if t not in targets]
    if missing:
        raise RuntimeError(f"this llama.cpp has no target(s) {missing}")
    wanted = [*REQUIRED_TARGETS, *(t for t in OPTIONAL_TARGETS if t in targets)]
    binaries = {name: build_dir / "bin" / name for name in wanted}
    if all(path.exists() for path in binaries.values()):
        logger.info("already built: %s", ", ".join(wanted))
        return binaries
    run(
        ["cmake", "--build", build_dir, "--config", "Release", "-j", str(jobs), "--target", *wanted]
    )
    return binaries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--version", help="llama-cpp-python version to download (default: newest)")
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 2, help="parallel compile jobs"
    )
    parser.add_argument(
        "--no-amx",
        action="store_true",
        help="build with AMX compiled out (-mno-amx-*), into CACHE/llama.cpp-build-noamx",
    )
    args = parser.parse_args(argv)
    setup_logging(args.verbose)

    layout = CacheLayout(args.cache)
    source = ensure_extracted(layout, ensure_sdist(layout, args.version))
    build_dir = layout.llama_build_dir_noamx if args.no_amx else layout.llama_build_dir
    configure(source, build_dir, cmake_options(args.no_amx))
    binaries = build(build_dir, args.jobs)
    print(f"source\t{source}")
    for name, path in binaries.items():
        print(f"{name}\t{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
