"""A full or read-only disk is one sentence from every command, never a traceback.

The full disk is real: a 256 KiB tmpfs (the demo GGUF is 340 KB, the demo IR 940 KB), and
``/dev/full``, which fails every write with ENOSPC. The read-only folder is a read-only bind
mount (root ignores permission bits). Mounting needs root, as CI has.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.store import ModelStore
from engine.store.download import PullRequest, pull
from engine.store.errors import NotEnoughSpace, disk_errors
from engine.store.gguf_import import import_gguf
from tests.store.conftest import REPO, sidelight
from tests.store.hub_server import HubServer
from tests.store.test_store import add_demo

_FULL = r"the disk holding \S+ is full; free some space and try again"
_READ_ONLY = (
    r"(\S+ is on a read-only disk;|permission denied for \S+; make it writable for your user or)"
    r" choose another models folder \(SIDELIGHT_MODELS_DIR, or models_dir in the settings file\)"
)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="/dev/full is Linux's")
def test_a_real_enospc_becomes_one_sentence() -> None:
    with (
        pytest.raises(NotEnoughSpace) as caught,
        disk_errors("importing model.gguf", Path("/srv/models")),
        open("/dev/full", "wb", buffering=0) as full,
    ):
        full.write(b"x")
    assert str(caught.value) == (
        "importing model.gguf failed: the disk holding /srv/models is full; "
        "free some space and try again"
    )


def test_import_onto_a_full_disk(small_disk: Path, tiny_gguf: Path, sidelight_home: Path) -> None:
    store = ModelStore(small_disk / "models")
    with pytest.raises(
        NotEnoughSpace, match=rf"^importing sidelight-demo-f16\.gguf failed: {_FULL}$"
    ):
        import_gguf(store, tiny_gguf)
    assert store.list() == [] and not any((store.root / ".partial").iterdir())  # space freed
    done = sidelight(sidelight_home, "import", str(tiny_gguf), SIDELIGHT_MODELS_DIR=str(store.root))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert re.fullmatch(
        rf"sidelight: importing sidelight-demo-f16\.gguf failed: {_FULL}",
        done.stderr.strip().splitlines()[-1],
    )


def test_a_download_that_fills_the_disk(small_disk: Path, hub: HubServer) -> None:
    """The free-space check passes (the disk lies, or fills up meanwhile); the write fails."""
    store = ModelStore(small_disk / "models")
    with pytest.raises(NotEnoughSpace, match=rf"^downloading {REPO} failed: {_FULL}$"):
        pull(store, PullRequest(repo=REPO), endpoint=hub.url, disk_free=lambda _: 1 << 40)
    assert store.list() == []


def test_a_read_only_models_folder(
    sidelight_home: Path,
    read_only: Callable[[Path], None],
    hub: HubServer,
    tiny_gguf: Path,
) -> None:
    store = ModelStore(sidelight_home / "models")
    add_demo(store, "demo")
    read_only(store.root)
    for command, env in (
        (("import", str(tiny_gguf)), {}),
        (("rm", "demo"), {}),
        (("pull", REPO), {"HF_ENDPOINT": hub.url}),
    ):
        done = sidelight(sidelight_home, *command, **env)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        doing = {"import": "importing sidelight-demo-f16.gguf", "rm": "removing demo"}
        expected = rf"sidelight: {re.escape(doing.get(command[0], f'downloading {REPO}'))} failed: "
        assert re.fullmatch(expected + _READ_ONLY, done.stderr.strip().splitlines()[-1]), (
            done.stderr
        )
    listed = sidelight(sidelight_home, "list")
    assert listed.returncode == 0 and listed.stdout.splitlines()[1].startswith("demo ")
