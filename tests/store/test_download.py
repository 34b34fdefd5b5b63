"""Pulling models from a hub: progress, cancel, resume (also after SIGKILL), integrity, errors.

The hub is a local stand-in (``tests/store/hub_server.py``) because the real one cannot be
reached here; the client side is the real ``huggingface_hub``. Only the free-disk probe is
replaced, in the one test that simulates a full disk.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from huggingface_hub import snapshot_download

from engine.store import ModelStore
from engine.store.catalog import Catalog
from engine.store.download import INCOMPLETE, PullRequest, pull
from engine.store.errors import Cancelled, HubError, NotEnoughSpace, StoreError
from engine.store.progress import Progress
from tests.store.conftest import (
    GATED,
    GGUF_ONLY,
    RAW,
    READER_TOKEN,
    REPO,
    ROOT,
    STRANGER_TOKEN,
    cli_env,
    same_files,
    sidelight,
)
from tests.store.hub_server import HubServer
from tests.waiting import wait_until

MODEL_ID = "sidelight-demo-ov"
BIG_FILE = "openvino_model.bin"


def resumed_ranges(hub: HubServer, filename: str) -> list[int]:
    """Start offsets of ranged GETs the hub saw for ``filename``."""
    return [
        int(rng.removeprefix("bytes=").rstrip("-"))
        for method, path, rng in hub.config.requests
        if method == "GET" and path.endswith(f"/{filename}") and rng
    ]


def test_fake_hub_serves_the_real_snapshot_download(hub: HubServer, tmp_path: Path) -> None:
    """The stand-in speaks the hub's API well enough for huggingface_hub's own downloader."""
    out = snapshot_download(REPO, endpoint=hub.url, local_dir=tmp_path / "snap")
    assert same_files(Path(out), hub.config.root / REPO, ignore=set()) == []


def test_pull_reports_progress_and_stores_a_complete_model(
    hub: HubServer, store: ModelStore
) -> None:
    events: list[Progress] = []
    model = pull(store, PullRequest(repo=REPO), endpoint=hub.url, progress=events.append)

    assert model.id == MODEL_ID
    assert same_files(model.folder, hub.config.root / REPO, ignore={"manifest.json"}) == []
    phases = [e.phase for e in events]
    assert phases[0] == "listing" and phases[-1] == "done"
    assert "verifying" in phases
    total = sum(p.stat().st_size for p in (hub.config.root / REPO).iterdir())
    assert events[-1].done == events[-1].total == total

    m = model.manifest
    assert (m.format, m.entry, m.source.kind, m.source.repo) == ("ir", ".", "hub", REPO)
    assert m.source.revision and len(m.source.revision) == 40
    assert m.weights == "fp32"  # the demo model is exported without compression
    assert m.architecture == "qwen2" and m.context_length
    assert m.capabilities["chat_template"] and m.capabilities["tools"]
    assert m.size_bytes == total and m.added_at
    assert [s.id for s in store.list()] == [MODEL_ID]
    assert store.spec(MODEL_ID).path == model.folder
    assert not (store.root / ".partial" / MODEL_ID).exists()
    assert sorted(p.name for p in model.folder.iterdir() if p.name.startswith(".")) == []
    # Pulling again is a no-op that returns the stored model.
    assert pull(store, PullRequest(repo=REPO), endpoint=hub.url).folder == model.folder


def test_catalog_pull_uses_the_catalog_id_and_facts(hub: HubServer, store: ModelStore) -> None:
    entry = Catalog.load().entries[0]
    hub_root = hub.config.root
    (hub_root / entry.repo).parent.mkdir(parents=True, exist_ok=True)
    (hub_root / REPO).rename(hub_root / entry.repo)
    model = pull(store, PullRequest(repo=entry.repo, catalog=entry), endpoint=hub.url)
    assert model.id == entry.id
    assert model.manifest.name == entry.name
    assert model.manifest.details["catalog_id"] == entry.id


def test_a_chosen_id_is_stored_in_its_canonical_form(hub: HubServer, store: ModelStore) -> None:
    model = pull(store, PullRequest(repo=REPO, model_id="My-Copy"), endpoint=hub.url)
    assert model.id == "my-copy" and model.folder.name == "my-copy"
    assert [m.id for m in store.list()] == ["my-copy"]
    assert store.get("My-Copy").folder == model.folder


def test_cancel_keeps_partial_bytes_and_the_next_pull_resumes(
    hub: HubServer, store: ModelStore
) -> None:
    hub.config.bytes_per_second = 300_000
    cancel = threading.Event()

    def on_progress(p: Progress) -> None:
        if p.item == BIG_FILE and p.done > 150_000:
            cancel.set()

    with pytest.raises(Cancelled):
        pull(store, PullRequest(repo=REPO), endpoint=hub.url, progress=on_progress, cancel=cancel)

    assert store.list() == [] and store.has_partial(MODEL_ID)
    part = store.root / ".partial" / MODEL_ID / INCOMPLETE / BIG_FILE
    kept = part.stat().st_size
    assert 0 < kept < (hub.config.root / REPO / BIG_FILE).stat().st_size

    hub.config.bytes_per_second = None
    model = pull(store, PullRequest(repo=REPO), endpoint=hub.url)
    assert resumed_ranges(hub, BIG_FILE) == [kept]
    assert same_files(model.folder, hub.config.root / REPO, ignore={"manifest.json"}) == []
    assert not store.has_partial(MODEL_ID)


def test_sigkill_mid_file_then_resume_is_byte_identical(
    hub: HubServer, sidelight_home: Path, store: ModelStore
) -> None:
    """``sidelight pull`` killed with SIGKILL mid-file resumes to an identical model."""
    hub.config.bytes_per_second = 120_000
    env = cli_env(sidelight_home, HF_ENDPOINT=hub.url)
    child = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "pull", REPO],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    part = store.root / ".partial" / MODEL_ID / INCOMPLETE / BIG_FILE

    def in_the_big_file() -> bool:
        if part.is_file() and part.stat().st_size > 100_000:
            return True
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        return False

    wait_until(in_the_big_file, "the download reached the big file", 60)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    assert child.returncode == -signal.SIGKILL
    if child.stderr:
        child.stderr.close()
    kept = part.stat().st_size

    listed = sidelight(sidelight_home, "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []

    hub.config.bytes_per_second = None
    done = sidelight(sidelight_home, "pull", REPO, HF_ENDPOINT=hub.url)
    assert done.returncode == 0, done.stderr
    assert f"added {MODEL_ID}" in done.stdout
    assert resumed_ranges(hub, BIG_FILE)[-1] >= kept - 64 * 1024  # unflushed tail may be lost
    assert resumed_ranges(hub, BIG_FILE)[-1] > 0
    model = store.get(MODEL_ID)
    assert same_files(model.folder, hub.config.root / REPO, ignore={"manifest.json"}) == []
    listed = sidelight(sidelight_home, "list", "--json")
    assert [m["id"] for m in json.loads(listed.stdout)] == [MODEL_ID]


def test_full_disk_fails_before_writing_anything(hub: HubServer, store: ModelStore) -> None:
    with pytest.raises(NotEnoughSpace, match=r"needs .* more on disk.*only 1\.0 MB is free"):
        pull(store, PullRequest(repo=REPO), endpoint=hub.url, disk_free=lambda _: 1024 * 1024)
    assert not [r for r in hub.config.requests if "/resolve/" in r[1]]
    staged = store.root / ".partial" / MODEL_ID
    assert not [p for p in staged.rglob("*") if p.is_file() and not p.name.startswith(".")]
    assert store.list() == []


def test_corrupt_partial_file_is_caught_and_fetched_again(
    hub: HubServer, store: ModelStore
) -> None:
    """A full-size but wrong partial file (disk error, power loss) never enters the store."""
    first = pull(store, PullRequest(repo=REPO, model_id="first"), endpoint=hub.url)
    staged = store.root / ".partial" / MODEL_ID
    state = json.dumps({"repo": REPO, "commit": first.manifest.source.revision})
    (staged / INCOMPLETE).mkdir(parents=True)
    (staged / ".sidelight-download.json").write_text(state)
    size = (hub.config.root / REPO / BIG_FILE).stat().st_size
    (staged / INCOMPLETE / BIG_FILE).write_bytes(b"\0" * size)

    with pytest.raises(StoreError, match=r"openvino_model\.bin failed its integrity check"):
        pull(store, PullRequest(repo=REPO), endpoint=hub.url)
    assert not store.contains(MODEL_ID)
    model = pull(store, PullRequest(repo=REPO), endpoint=hub.url)
    assert same_files(model.folder, hub.config.root / REPO, ignore={"manifest.json"}) == []


@pytest.mark.parametrize(
    ("repo", "token", "message"),
    [
        ("OpenVINO/no-such-model", None, r"no model repo named 'OpenVINO/no-such-model'"),
        (GATED, None, r"is gated: sign in on the hub, accept the model's terms"),
        (GATED, STRANGER_TOKEN, r"your token has no access yet: accept the model's terms"),
        (REPO, "hf_not_a_real_token", r"refused the token \(invalid or expired\)"),
        (RAW, None, r"not an OpenVINO model .*sidelight convert someone/raw-checkpoint"),
        (GGUF_ONLY, None, r"holds GGUF files.*sidelight import"),
    ],
)
def test_refusals_have_clear_messages(
    hub: HubServer, store: ModelStore, repo: str, token: str | None, message: str
) -> None:
    with pytest.raises(StoreError, match=message):
        pull(store, PullRequest(repo=repo), endpoint=hub.url, token=token)
    assert store.list() == []


def test_gated_repo_downloads_with_a_token(hub: HubServer, store: ModelStore) -> None:
    model = pull(store, PullRequest(repo=GATED), endpoint=hub.url, token=READER_TOKEN)
    assert model.id == "gated-demo-ov"


def test_no_network_says_so(store: ModelStore) -> None:
    with pytest.raises(HubError, match=r"cannot reach the model hub"):
        pull(store, PullRequest(repo=REPO), endpoint="http://127.0.0.1:9")


def test_cli_pull_messages(hub: HubServer, sidelight_home: Path) -> None:
    missing = sidelight(sidelight_home, "pull", "OpenVINO/nope", HF_ENDPOINT=hub.url)
    assert missing.returncode == 1
    assert "no model repo named 'OpenVINO/nope'" in missing.stderr
    bad_token = sidelight(
        sidelight_home, "pull", GATED, HF_ENDPOINT=hub.url, SIDELIGHT_HF_TOKEN="hf_wrong"
    )
    assert bad_token.returncode == 1
    assert "refused the token" in bad_token.stderr
    unknown = sidelight(sidelight_home, "pull", "not-in-catalog")
    assert unknown.returncode == 2 and "not in the catalog" in unknown.stderr
    ok = sidelight(
        sidelight_home, "pull", GATED, HF_ENDPOINT=hub.url, SIDELIGHT_HF_TOKEN=READER_TOKEN
    )
    assert ok.returncode == 0, ok.stderr
    assert "pulling OpenVINO/gated-demo-ov" in ok.stderr and "verifying" in ok.stderr


def test_a_whisper_catalog_entry_downloads_as_a_speech_recogniser(
    hub: HubServer, store: ModelStore
) -> None:
    """The catalog's Whisper build, published here by the fake hub as the tiny Whisper
    fixture under the OpenVINO organisation's repo name (the real hub is unreachable), is
    stored as a transcription model, so dictation and /v1/audio/transcriptions find it."""
    entry = Catalog.load().find("whisper-base-fp16")
    assert entry is not None and entry.task == "transcription"
    shutil.copytree(ROOT / "tests" / "fixtures" / "tiny-whisper", hub.config.root / entry.repo)
    model = pull(store, PullRequest(repo=entry.repo, catalog=entry), endpoint=hub.url)
    assert (model.id, model.manifest.task) == (entry.id, "transcription")
    assert (model.folder / "openvino_encoder_model.xml").is_file()
