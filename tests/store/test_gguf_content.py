"""A stored GGUF is the store's own copy, and it is checked by content before every load.

Issue 25, finding 6: ``sidelight import`` hard-linked the person's file (writing the store's
copy rewrote their original), and the check before a load was cached by (size, mtime), so a
same-size rewrite with the mtime put back reached the engine unchecked: a worker segfault,
500s with C++ internals, or garbage output.
"""

from __future__ import annotations

import errno
import itertools
import os
import shutil
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from engine.file_key import FileKey, sample_ranges, sampled_digest
from engine.gguf import GGUFError
from engine.gguf_check import check_gguf, forget_checks
from engine.models import ModelError
from engine.store import ModelStore, gguf_import
from engine.store.content import CONTENT, ContentRecord, verify_content
from engine.store.gguf_import import copy_file, import_gguf
from engine.store.manifest import write_manifest
from engine.store.progress import Progress
from tests.conftest import TINY_GGUF
from tests.engine.gguf_builder import CRAFTED, load
from tests.server.harness import import_gguf as cli_import
from tests.server.harness import running_server
from tests.waiting import wait_until

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _rewrite_keeping_size_and_mtime(path: Path, data: bytes) -> None:
    """Write ``data`` (as long as the file) over ``path`` in place and put the old
    modification time back, as ``touch -d`` or a sync tool does."""
    before = path.stat()
    assert len(data) == before.st_size
    with path.open("r+b") as fh:
        fh.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def _garbled_weights(original: bytes) -> bytes:
    """The same file with the last 64 KB of tensor data inverted: a valid layout, other
    weights (the model would answer garbage)."""
    cut = len(original) - 64 * 1024
    return original[:cut] + bytes(b ^ 0xFF for b in original[cut:])


def test_import_copies_the_file_and_never_shares_it(tmp_path: Path, store: ModelStore) -> None:
    """The person's file is byte for byte the same, and not the same inode, after the import
    and after the store's copy is written."""
    mine = tmp_path / "mine.gguf"
    shutil.copyfile(TINY_GGUF, mine)
    original = mine.read_bytes()
    stored = import_gguf(store, mine, model_id="mine")
    assert stored.path.read_bytes() == original
    assert not os.path.samefile(stored.path, mine)
    assert mine.stat().st_nlink == 1
    record = ContentRecord.from_details(stored.manifest.details)
    assert record is not None and record.key == FileKey.of(stored.path)
    with stored.path.open("r+b") as fh:  # something writes the store's copy
        fh.seek(len(original) // 2)
        fh.write(b"\0" * 4096)
    assert mine.read_bytes() == original


def test_every_way_of_copying_gives_the_same_bytes_with_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whichever way this filesystem copies (a reflink or ``copy_file_range``), and the
    streamed fallback a filesystem pair without either takes (simulated: ``copy_file_range``
    failing with EXDEV, which an older kernel across filesystems gives), the copy is exact
    and progress is reported."""
    source = TINY_GGUF
    seen: list[Progress] = []
    native = copy_file(source, tmp_path / "native.gguf", seen.append, None)
    assert native in ("reflink", "copy_file_range", "stream")
    assert (tmp_path / "native.gguf").read_bytes() == source.read_bytes()

    def no_range(*_: object) -> int:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(gguf_import, "_reflink", lambda src, out: False)
    monkeypatch.setattr(os, "copy_file_range", no_range, raising=False)
    streamed: list[Progress] = []
    assert copy_file(source, tmp_path / "stream.gguf", streamed.append, None) == "stream"
    assert (tmp_path / "stream.gguf").read_bytes() == source.read_bytes()
    assert not os.path.samefile(tmp_path / "stream.gguf", source)


def test_a_same_size_rewrite_with_the_mtime_put_back_is_checked_again(tmp_path: Path) -> None:
    """The check cached by (size, mtime) passed such a rewrite unchecked."""
    gguf = tmp_path / "model.gguf"
    shutil.copyfile(TINY_GGUF, gguf)
    check_gguf(gguf)
    craft, expected = CRAFTED["offset past the end"]
    _rewrite_keeping_size_and_mtime(gguf, craft(load(TINY_GGUF)))
    with pytest.raises(GGUFError, match=expected):
        check_gguf(gguf)


def test_the_sampled_digest_catches_a_rewrite_the_file_key_misses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ctime does not move on a write (Windows reports the creation time, FAT keeps
    none) the key stays the same; the sampled digest before a load still sees the new
    header. Such a filesystem cannot exist here, so the key is held still."""
    gguf = tmp_path / "model.gguf"
    shutil.copyfile(TINY_GGUF, gguf)
    frozen = FileKey.of(gguf)
    monkeypatch.setattr(FileKey, "of", classmethod(lambda cls, path: frozen))
    forget_checks()
    check_gguf(gguf, sampled=True)
    craft, expected = CRAFTED["overlapping tensors"]
    _rewrite_keeping_size_and_mtime(gguf, craft(load(TINY_GGUF)))
    assert check_gguf(gguf).tensors  # without sampling, the cached answer (listings)
    with pytest.raises(GGUFError, match=expected):
        check_gguf(gguf, sampled=True)


def test_sample_ranges_cover_the_header_and_the_end() -> None:
    size, head = 10 * 1024 * 1024, 5000
    ranges = sample_ranges(size, head)
    assert ranges[0] == (0, head) and ranges[-1][1] == size and len(ranges) == 17
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(ranges))
    assert sample_ranges(100, 40) == [(0, 40), (40, 100)]


def test_a_stored_gguf_whose_bytes_changed_is_refused_and_a_moved_one_is_not(
    tmp_path: Path, store: ModelStore
) -> None:
    """Same bytes under a new inode (the store moved, a backup restored) are served, the new
    key recorded; other bytes with a valid layout are refused: they were not imported."""
    mine = tmp_path / "mine.gguf"
    shutil.copyfile(TINY_GGUF, mine)
    stored = import_gguf(store, mine, model_id="demo-gguf")
    verify_content(stored.path, stored.manifest, stored.folder)
    moved = stored.path.with_suffix(".tmp")
    shutil.copyfile(stored.path, moved)
    os.replace(moved, stored.path)  # a new inode and ctime, the same bytes
    store.spec_to_load("demo-gguf")
    record = ContentRecord.from_details(store.get("demo-gguf").manifest.details)
    assert record is not None and record.key == FileKey.of(stored.path)
    _rewrite_keeping_size_and_mtime(stored.path, _garbled_weights(TINY_GGUF.read_bytes()))
    with pytest.raises(ModelError, match="changed since it was imported"):
        store.spec_to_load("demo-gguf")


def test_a_model_stored_without_a_record_gets_one_on_its_first_load(store: ModelStore) -> None:
    stored = import_gguf(store, TINY_GGUF, model_id="old")
    details = {k: v for k, v in stored.manifest.details.items() if k != CONTENT}
    write_manifest(stored.folder, replace(stored.manifest, details=details))
    assert ContentRecord.from_details(store.get("old").manifest.details) is None
    store.spec_to_load("old")
    record = ContentRecord.from_details(store.get("old").manifest.details)
    assert record is not None and record.sample == sampled_digest(
        stored.path, check_gguf(stored.path).header_size
    )


@pytest.mark.parametrize("change", ["crafted header", "garbled weights"])
def test_a_served_store_gguf_rewritten_in_place_is_a_422_not_a_crash(
    change: str, sidelight_home: Path, tmp_path: Path
) -> None:
    """A real server: the stored GGUF answers, is unloaded, is rewritten in place at the same
    size with its mtime put back; asking for it again is a 422 naming the damage, and no
    worker crashed (``restarts`` stays 0)."""
    store = ModelStore(sidelight_home / "models")
    mine = tmp_path / "mine.gguf"  # never the fixture itself: a hard link would share it
    shutil.copyfile(TINY_GGUF, mine)
    cli_import(sidelight_home, mine, "stored-gguf")
    stored = store.get("stored-gguf").path
    with running_server(sidelight_home, None) as server:
        url = server.base_url
        first = httpx.post(f"{url}/v1/chat/completions", json={**CHAT, "model": "stored-gguf"})
        assert first.status_code == 200, first.text
        unload = {"model": "stored-gguf", "keep_alive": 0}
        assert httpx.post(f"{url}/api/generate", json=unload, timeout=60).status_code == 200
        wait_until(
            lambda: all(m["id"] != "stored-gguf" for m in server.health().json()["models"]),
            lambda: f"'stored-gguf' unloaded: {server.health().json()}",
            60,
        )
        if change == "crafted header":
            craft, expected = CRAFTED["offset past the end"]
            data = craft(load(TINY_GGUF))
        else:
            data, expected = _garbled_weights(TINY_GGUF.read_bytes()), "changed since it was"
        _rewrite_keeping_size_and_mtime(stored, data)
        again = httpx.post(
            f"{url}/v1/chat/completions", json={**CHAT, "model": "stored-gguf"}, timeout=60
        )
        assert again.status_code == 422, again.text
        error = again.json()["error"]
        assert error["code"] == "model_damaged" and error["param"] == "model"
        assert expected in error["message"] and "mine.gguf" in error["message"]
        health = server.health().json()
        assert health["restarts"] == 0, health
        assert all(m["id"] != "stored-gguf" for m in health["models"]), health
        still = httpx.post(f"{url}/v1/chat/completions", json={**CHAT, "model": "sidelight-demo"})
        assert still.status_code == 200, still.text
