"""Benchmark tooling for Sidelight: builds comparison baselines and measures raw engines.

Nothing here is imported by ``engine/`` or ``desktop/``. Large artefacts (llama.cpp build,
random-weight models) live in a cache folder, never in the repository; see ``bench.common``.
Run the modules from the repository root with ``python -m bench.<module>``.
"""
