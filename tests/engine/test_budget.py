"""The memory budget and a model's cost (engine/supervisor/budget.py), on this machine.

Real psutil readings and the real tiny model's files; nothing is mocked.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from engine.models import spec_from_path
from engine.settings import Settings, SettingsError, load_settings
from engine.supervisor import budget


def test_auto_budget_leaves_the_os_a_reserve(sidelight_home: Path) -> None:
    settings = load_settings()
    total = psutil.virtual_memory().total // budget.MB
    reserve = max(budget.RESERVE_MIN_MB, int(total * budget.RESERVE_FRACTION))
    assert settings.memory_budget_mb == 0  # auto
    assert budget.budget_mb(settings) == max(0, total - reserve)


def test_an_explicit_budget_wins_and_is_validated(sidelight_home: Path) -> None:
    settings = load_settings(
        {"SIDELIGHT_HOME": str(sidelight_home), "SIDELIGHT_MEMORY_BUDGET_MB": "3000"}
    )
    assert budget.budget_mb(settings) == 3000
    with pytest.raises(SettingsError, match="memory_budget_mb"):
        replace(settings, memory_budget_mb=-1).validate()
    with pytest.raises(SettingsError, match="load_wait_seconds"):
        replace(settings, load_wait_seconds=0).validate()


def test_estimate_counts_files_kv_budget_and_worker(tiny_model: Path) -> None:
    settings = Settings(paths=load_settings().paths)
    spec = spec_from_path(tiny_model)
    files = budget.files_mb(tiny_model)
    kv = int(settings.kv_cache_gb * 1024)
    assert budget.estimated_mb(spec, settings) == files + kv + budget.WORKER_BASE_MB
    embed = replace(spec, task="embeddings")
    assert budget.estimated_mb(embed, settings) == files + budget.WORKER_BASE_MB
    assert budget.files_mb(tiny_model / "missing") == 0


def test_measured_memory_is_the_process_rss() -> None:
    rss = psutil.Process(os.getpid()).memory_info().rss // budget.MB
    measured = budget.measured_mb(os.getpid())
    assert measured is not None and abs(measured - rss) <= 64  # this process allocates on
    assert budget.measured_mb(None) is None
    gone = psutil.Popen(["true"])
    gone.wait()
    assert budget.measured_mb(gone.pid) is None
