"""The no-AMX llama.cpp build: its CMake options and where its binaries are looked up.

Why: on a CPU with AMX the native build crashes in its AMX kernels on repacked weights;
the no-AMX build must differ from it only by the flags that compile AMX out, and live in
its own folder so both builds stay side by side.
"""

from __future__ import annotations

from pathlib import Path

from bench.build_llama_cpp import CMAKE_OPTIONS, cmake_options
from bench.common import CacheLayout


def test_no_amx_keeps_native_and_only_adds_the_amx_off_flags() -> None:
    assert cmake_options() == CMAKE_OPTIONS
    options = cmake_options(no_amx=True)
    assert options["GGML_NATIVE"] == "ON"
    added = {k: v for k, v in options.items() if CMAKE_OPTIONS.get(k) != v}
    assert set(added) == {"CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS"}
    for flags in added.values():
        assert set(flags.split()) == {"-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"}


def test_no_amx_binaries_live_in_their_own_build_folder() -> None:
    layout = CacheLayout(Path("/cache"))
    assert layout.llama_binary("llama-bench") == Path("/cache/llama.cpp-build/bin/llama-bench")
    assert layout.llama_binary("llama-server", no_amx=True) == Path(
        "/cache/llama.cpp-build-noamx/bin/llama-server"
    )
