"""Fixtures for the model store: a fake hub with fixture repos, a store, a CLI runner.

The hub is :mod:`tests.store.hub_server` (the real hub is unreachable here); everything that
talks to it is the real ``huggingface_hub`` client.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from engine.settings import load_settings
from engine.store import ModelStore
from tests.server.harness import ServerProcess
from tests.store.hub_server import HubConfig, HubServer

ROOT = Path(__file__).resolve().parents[2]
TINY_MODEL = ROOT / "resources" / "models" / "sidelight-demo"
REPO = "OpenVINO/sidelight-demo-ov"
GATED = "OpenVINO/gated-demo-ov"
RAW = "someone/raw-checkpoint"
GGUF_ONLY = "someone/gguf-only"
READER_TOKEN = "hf_reader_token"  # may read GATED
STRANGER_TOKEN = "hf_stranger_token"  # valid, but has not accepted GATED's terms


@pytest.fixture(autouse=True)
def no_hub_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's own hub token must not reach the fake hub (it would be refused)."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def hub_root(tmp_path: Path, tiny_gguf: Path) -> Path:
    root = tmp_path / "hub"
    for repo in (REPO, GATED):
        shutil.copytree(TINY_MODEL, root / repo)
        (root / repo / "README.md").write_text(f"# {repo}\n\nfixture repo\n")
    (root / RAW).mkdir(parents=True)
    (root / RAW / "config.json").write_text('{"model_type": "qwen2"}')
    (root / RAW / "model.safetensors").write_bytes(os.urandom(20_000))
    (root / GGUF_ONLY).mkdir(parents=True)
    shutil.copy(tiny_gguf, root / GGUF_ONLY / "model-f16.gguf")
    return root


@pytest.fixture
def hub(hub_root: Path) -> Iterator[HubServer]:
    config = HubConfig(
        root=hub_root,
        gated={GATED},
        tokens={READER_TOKEN: {GATED}, STRANGER_TOKEN: set()},
    )
    with HubServer(config) as server:
        yield server


@pytest.fixture
def store(sidelight_home: Path) -> ModelStore:
    return ModelStore.from_settings(load_settings())


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIDELIGHT_", "HF_"))}
    env.update({"SIDELIGHT_HOME": str(home), "PYTHONUNBUFFERED": "1"})
    env.setdefault("SIDELIGHT_CPU_SELF_TUNE", "false")  # a fresh home would tune each serve
    env.update(extra)
    return env


def sidelight(
    home: Path, *args: str, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``sidelight ARGS`` (as ``python -m engine.cli``) to completion."""
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args],
        env=cli_env(home, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )


def same_files(a: Path, b: Path, *, ignore: set[str]) -> list[str]:
    """Relative paths that differ between two trees (missing, extra or different bytes).

    Hidden files and folders (``.cache``) are left out of the comparison.
    """

    def files(root: Path) -> dict[str, bytes]:
        found = {}
        for path in root.rglob("*"):
            rel = path.relative_to(root)
            hidden = any(part.startswith(".") for part in rel.parts)
            if path.is_file() and rel.as_posix() not in ignore and not hidden:
                found[rel.as_posix()] = path.read_bytes()
        return found

    left, right = files(a), files(b)
    return sorted(k for k in left.keys() | right.keys() if left.get(k) != right.get(k))


@contextmanager
def serving(home: Path, model_id: str) -> Iterator[str]:
    """``sidelight serve`` a stored model by id; yields the server's base URL."""
    server = ServerProcess(home, Path(model_id))
    try:
        server.wait_ready()
        yield server.base_url
    finally:
        server.stop()


def assert_completes(base_url: str, model_id: str, max_tokens: int) -> None:
    """A chat completion of exactly ``max_tokens`` tokens succeeds."""
    reply = httpx.post(
        f"{base_url}/v1/chat/completions",
        json={
            "model": model_id,
            "messages": [{"role": "user", "content": "Hello"}],
            "max_tokens": max_tokens,
            "ignore_eos": True,
        },
        timeout=60,
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] == max_tokens


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True, check=False).returncode == 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 256 KiB disk (tmpfs): writing more fails with ENOSPC. Needs root (CI is root)."""
    folder = tmp_path / "small-disk"
    folder.mkdir()
    if os.geteuid() != 0 or not _mount("-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)):
        pytest.skip("mounting a small tmpfs needs root")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@contextmanager
def read_only_folder(folder: Path) -> Iterator[None]:
    """``folder`` read-only inside the block: a read-only bind mount over itself as root
    (root ignores permission bits), ``chmod a-w`` otherwise."""
    if os.geteuid() != 0:
        mode = folder.stat().st_mode
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(mode)
        return
    if not _mount("--bind", str(folder), str(folder)):
        pytest.skip("bind mounts are not allowed here")
    try:
        if not _mount("-o", "remount,bind,ro", str(folder)):
            pytest.skip("read-only remounts are not allowed here")
        yield
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.fixture
def read_only() -> Iterator[Callable[[Path], None]]:
    """``read_only(folder)`` keeps ``folder`` read-only until the test ends."""
    with ExitStack() as stack:
        yield lambda folder: stack.enter_context(read_only_folder(folder))
