"""Hub search, sizing and GGUF download against the local hub stand-in (the real hub is
unreachable here; everything that talks to the stand-in is the real ``huggingface_hub``
client), with the real store and GenAI's GGUF reader on the import."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from huggingface_hub import HfApi

from engine.store import ModelStore
from engine.store.catalog import GB, MachineInfo
from engine.store.download import pull_gguf
from engine.store.errors import Cancelled, HubError
from engine.store.progress import Progress
from engine.store.search import UNREACHABLE, HubModel, search_hub, size_result
from tests.conftest import TINY_GGUF
from tests.store.hub_server import HubServer
from tests.store.search_fixtures import GGUF_REPO, OTHER, POPULAR_OV, Q4, QUIET_OV

LAPTOP = MachineInfo(total_memory=16 * GB, device_kinds=frozenset({"CPU", "GPU"}))
TINY_MACHINE = MachineInfo(total_memory=1 * GB, device_kinds=frozenset({"CPU"}))


def test_search_finds_both_kinds_most_downloaded_first(search_hub_server: HubServer) -> None:
    found = search_hub("TINY-chat", endpoint=search_hub_server.url)
    assert [(m.repo, m.kind, m.downloads) for m in found] == [
        (GGUF_REPO, "gguf", 2500),
        (POPULAR_OV, "openvino", 900),
        (QUIET_OV, "openvino", 40),
    ]
    assert search_hub("bge", endpoint=search_hub_server.url, kinds=("gguf",)) == []
    assert [m.repo for m in search_hub("", endpoint=search_hub_server.url, limit=2)] == [
        OTHER,
        GGUF_REPO,
    ]


def test_the_stand_in_answers_list_models_as_the_search_asks_it(
    search_hub_server: HubServer,
) -> None:
    """The request the search sends is the one ``HfApi.list_models`` sends: same answer."""
    api = HfApi(endpoint=search_hub_server.url)
    listed = api.list_models(search="tiny", filter="openvino", sort="downloads", limit=20)
    assert [m.id for m in listed] == [POPULAR_OV, QUIET_OV]
    ours = search_hub("tiny", endpoint=search_hub_server.url, kinds=("openvino",))
    assert [m.repo for m in ours] == [POPULAR_OV, QUIET_OV]
    searches = [p for method, p, _ in search_hub_server.config.requests if p == "/api/models"]
    assert len(searches) == 2


def test_a_result_is_sized_and_judged_like_the_catalog(search_hub_server: HubServer) -> None:
    url = search_hub_server.url
    gguf = HubModel(GGUF_REPO, "gguf", 2500, 30, "text-generation")
    sized = size_result(gguf, LAPTOP, endpoint=url)
    assert [f.path for f in sized.choices] == ["tiny-chat-Q4_K_M.gguf", "tiny-chat-Q8_0.gguf"]
    assert sized.gguf_file == Q4  # Q4_K_M first; the vision projector is not offered
    assert sized.download_bytes == TINY_GGUF.stat().st_size
    assert sized.status == "fits" and sized.reason == f"needs about {sized.memory_gb:g} GB"
    other = size_result(gguf, TINY_MACHINE, gguf_file="tiny-chat-Q8_0.gguf", endpoint=url)
    assert other.gguf_file == "tiny-chat-Q8_0.gguf" and other.status == "too-big"
    assert other.reason == f"needs about {other.memory_gb:g} GB; this machine has 1 GB"

    ir = size_result(HubModel(POPULAR_OV, "openvino", 900, 90, None), LAPTOP, endpoint=url)
    folder = search_hub_server.config.root / POPULAR_OV
    on_disk = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    assert ir.download_bytes == on_disk - (folder / ".hub.json").stat().st_size
    assert ir.gguf_file is None and ir.status == "fits"


def test_an_unreachable_hub_is_said_in_one_line() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with pytest.raises(HubError) as raised:
        search_hub("qwen", endpoint=closed)
    assert str(raised.value) == UNREACHABLE
    with pytest.raises(HubError) as sizing:
        size_result(HubModel(GGUF_REPO, "gguf", 0, 0, None), LAPTOP, endpoint=closed)
    assert str(sizing.value) == UNREACHABLE


def test_a_gguf_result_downloads_one_file_into_the_store(
    search_hub_server: HubServer, tmp_path: Path
) -> None:
    store = ModelStore(tmp_path / "models")
    stored = pull_gguf(store, GGUF_REPO, Q4, endpoint=search_hub_server.url)
    assert stored.id == "tiny-chat-q4_k_m" and stored.manifest.format == "gguf"
    assert stored.spec().path.read_bytes() == TINY_GGUF.read_bytes()
    assert [m.id for m in store.list()] == [stored.id]
    fetched = [p for m, p, _ in search_hub_server.config.requests if m == "GET" and "resolve" in p]
    assert fetched == [f"/{GGUF_REPO}/resolve/{fetched[0].split('/')[4]}/{Q4}"]
    assert not any((store.root / ".partial").glob("*"))  # the download copy is gone


def test_a_cancelled_gguf_download_resumes_where_it_stopped(
    search_hub_server: HubServer, tmp_path: Path
) -> None:
    """Cancelled mid-file (the stand-in sends slowly), then pulled again: a Range request."""
    search_hub_server.config.bytes_per_second = 100_000
    store = ModelStore(tmp_path / "models")
    cancel = threading.Event()

    def progress(report: Progress) -> None:
        if report.done > 60_000:
            cancel.set()

    with pytest.raises(Cancelled):
        pull_gguf(
            store, GGUF_REPO, Q4, endpoint=search_hub_server.url, progress=progress, cancel=cancel
        )
    assert not store.list() and any((store.root / ".partial").iterdir())
    search_hub_server.config.bytes_per_second = None
    stored = pull_gguf(store, GGUF_REPO, Q4, endpoint=search_hub_server.url)
    assert stored.spec().path.read_bytes() == TINY_GGUF.read_bytes()
    ranges = [r for m, p, r in search_hub_server.config.requests if m == "GET" and p.endswith(Q4)]
    assert ranges[0] is None and ranges[-1] is not None and ranges[-1].startswith("bytes=")
