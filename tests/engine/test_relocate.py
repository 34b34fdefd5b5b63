"""The store moves from the cache folder to the data folder: atomic per model, resumable.

Real files in tmp dirs. A second filesystem cannot be mounted here, so the cross-filesystem
path is reached by making ``os.replace`` raise ``OSError(EXDEV)`` for the model-folder rename
(what the OS raises across devices); every other call is the real one.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest

from engine.settings import load_settings
from engine.store import relocate
from engine.store.relocate import relocate_store


def _model(root: Path, name: str, size: int) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "weights.bin").write_bytes(b"x" * size)
    (folder / "manifest.json").write_text("{}")


def _exdev_for_models(monkeypatch: pytest.MonkeyPatch, old: Path) -> None:
    real = os.replace

    def fake(src: object, dst: object) -> None:
        if Path(str(src)).parent == old:
            raise OSError(errno.EXDEV, "cross-device link")
        real(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(relocate.os, "replace", fake)


def test_same_fs_move_and_progress_totals(tmp_path: Path) -> None:
    old, new = tmp_path / "cache" / "models", tmp_path / "data" / "models"
    _model(old, "a", 1000)
    _model(old, "b", 3000)
    (old / "half").mkdir()  # not a model: no manifest
    calls: list[tuple[int, int]] = []
    assert relocate_store(old, new, lambda d, t: calls.append((d, t))) == 2
    assert (new / "a" / "weights.bin").stat().st_size == 1000
    assert (new / "b" / "weights.bin").stat().st_size == 3000
    assert not (old / "a").exists() and not (old / "b").exists()
    assert calls == [(1002, 4004), (4004, 4004)]


def test_cross_fs_move_copies_then_deletes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    _model(old, "a", 5000)
    _exdev_for_models(monkeypatch, old)
    assert relocate_store(old, new) == 1
    assert (new / "a" / "weights.bin").read_bytes() == b"x" * 5000
    assert not (old / "a").exists()
    assert not (new / ".relocating").exists()


def test_interrupted_copy_loses_nothing_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    _model(old, "a", 100)
    _model(old, "b", 200)
    _exdev_for_models(monkeypatch, old)
    real_copy = shutil.copy2

    def crashing_copy(src: str, dst: str, **kw: object) -> object:
        if "b" in Path(src).parts and Path(src).name == "weights.bin":
            real_copy(src, dst)
            raise OSError(errno.EIO, "crash mid-copy")
        return real_copy(src, dst)

    real_copytree = shutil.copytree
    monkeypatch.setattr(
        relocate.shutil,
        "copytree",
        lambda src, dst, **kw: real_copytree(src, dst, copy_function=crashing_copy),
    )
    with pytest.raises(OSError):
        relocate_store(old, new)
    # every model is whole in exactly one place
    assert (new / "a" / "manifest.json").is_file() and not (old / "a").exists()
    assert (old / "b" / "weights.bin").stat().st_size == 200 and not (new / "b").exists()
    monkeypatch.setattr(relocate.shutil, "copytree", real_copytree)
    assert relocate_store(old, new) == 1
    assert (new / "b" / "weights.bin").stat().st_size == 200
    assert not (old / "b").exists() and not (new / ".relocating").exists()


def test_user_set_models_dir_is_not_migrated(tmp_path: Path) -> None:
    env = {"SIDELIGHT_MODELS_DIR": str(tmp_path / "mine"), "SIDELIGHT_CONFIG_DIR": str(tmp_path)}
    assert load_settings(env).paths.legacy_models_dir is None
    default = load_settings({"SIDELIGHT_CONFIG_DIR": str(tmp_path)}).paths
    assert default.legacy_models_dir is not None
    assert default.models_dir.parent != default.legacy_models_dir.parent


def test_reports_each_chunk_and_a_cancel_mid_copy_keeps_the_model_whole(tmp_path: Path) -> None:
    """Across two real filesystems (``/dev/shm`` and the temp folder): the report follows each
    8 MB chunk, and a cancel after the first chunk discards the half copy."""
    shm = Path("/dev/shm")  # a tmpfs: another device than the temp folder
    if (
        not (shm.is_dir() and os.access(shm, os.W_OK))
        or shm.stat().st_dev == tmp_path.stat().st_dev
    ):
        pytest.skip("no second filesystem to copy across (the EXDEV tests above cover copying)")
    base = Path(tempfile.mkdtemp(prefix="sidelight-relocate-", dir=shm))
    try:
        old, new = base / "models", tmp_path / "new"
        _model(old, "a", 20 << 20)  # three chunks
        _model(old, "b", 1000)
        cancel = threading.Event()
        seen: list[relocate.MoveProgress] = []

        def report(progress: relocate.MoveProgress) -> None:
            seen.append(progress)
            if progress.models_done == 0 and progress.bytes_done > 0:
                cancel.set()  # after the first chunk of "a"

        with pytest.raises(relocate.MoveCancelled):
            relocate_store(old, new, report=report, cancel=cancel)
        assert seen[0] == relocate.MoveProgress(0, 2, 0, (20 << 20) + 1000 + 4)
        assert 0 < seen[-1].bytes_done < 20 << 20  # stopped after its first chunk
        assert (old / "a" / "weights.bin").stat().st_size == 20 << 20  # whole, in the old place
        assert not (new / "a").exists() and not any((new / ".relocating").iterdir())

        seen.clear()
        assert relocate_store(old, new, report=seen.append) == 2  # the next start resumes
        assert (new / "a" / "weights.bin").stat().st_size == 20 << 20
        assert not (old / "a").exists() and not (old / "b").exists()
        assert seen[0].models_done == 0 and seen[-1].models_done == 2
        chunks = [p.bytes_done for p in seen if p.models_done == 0]
        assert len(chunks) >= 4 and chunks == sorted(chunks)  # start, then chunk by chunk
    finally:
        shutil.rmtree(base, ignore_errors=True)
