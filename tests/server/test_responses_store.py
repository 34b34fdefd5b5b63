"""The response store: round trips, ids that are never paths, expiry, count and size bounds,
atomic writes, and damaged files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from engine.server.responses.objects import new_id
from engine.server.responses.store import ResponseStore, StoredResponse

DAY = 24 * 3600.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def stored(text: str = "Hi!", context: list[dict[str, Any]] | None = None) -> StoredResponse:
    item = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text}],
    }
    response = {"id": new_id("resp"), "object": "response", "status": "completed", "output": [item]}
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hello"}]}
    return StoredResponse(response, context if context is not None else [user])


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> ResponseStore:
    return ResponseStore(tmp_path / "responses", clock=clock)


def test_round_trip_and_history(store: ResponseStore) -> None:
    kept = stored()
    assert store.save(kept)
    loaded = store.load(kept.id)
    assert loaded == kept
    assert loaded.history() == [*kept.context, *kept.response["output"]]
    assert [p.name for p in store.root.iterdir()] == [f"{kept.id}.json"]  # no temporary left


def test_a_new_store_finds_what_an_earlier_one_wrote(
    store: ResponseStore, tmp_path: Path, clock: Clock
) -> None:
    kept = stored()
    store.save(kept)
    assert ResponseStore(store.root, clock=clock).load(kept.id) == kept


@pytest.mark.parametrize(
    "response_id",
    ["", "resp_", "../responses/x", "resp_" + "0" * 47, "resp_" + "0" * 48 + "/..", "RESP_" + "a" * 48,
     "resp_" + "g" * 48, "/etc/passwd", "resp_" + "0" * 48 + ".json"],
)  # fmt: skip
def test_ids_are_never_paths(store: ResponseStore, tmp_path: Path, response_id: str) -> None:
    (tmp_path / "passwd").write_text("secret")
    store.save(stored())
    assert store.load(response_id) is None
    assert store.delete(response_id) is False
    assert (tmp_path / "passwd").read_text() == "secret"


def test_unknown_ids_and_deletes(store: ResponseStore) -> None:
    kept = stored()
    assert store.load(new_id("resp")) is None
    assert store.delete(new_id("resp")) is False
    store.save(kept)
    assert store.delete(kept.id) is True
    assert store.load(kept.id) is None
    assert store.delete(kept.id) is False
    assert list(store.root.iterdir()) == []


def test_saving_refuses_an_id_it_never_gives() -> None:
    bad = StoredResponse({"id": "../escape", "output": []}, [])
    with pytest.raises(ValueError, match="not a response id"):
        ResponseStore(Path("/nonexistent")).save(bad)


def test_responses_expire(store: ResponseStore, clock: Clock) -> None:
    old, young = stored("old"), stored("young")
    store.save(old)
    clock.now += 20 * DAY
    store.save(young)
    clock.now += 11 * DAY  # old is 31 days old, young 11
    assert store.load(old.id) is None
    assert not (store.root / f"{old.id}.json").exists()
    assert store.load(young.id) == young
    # Expired files are also removed by the next save, read or not.
    clock.now += 20 * DAY
    store.save(stored("new"))
    assert not (store.root / f"{young.id}.json").exists()


def test_count_bound_removes_the_oldest(tmp_path: Path, clock: Clock) -> None:
    store = ResponseStore(tmp_path, max_count=3, clock=clock)
    kept = []
    for i in range(5):
        kept.append(stored(f"reply {i}"))
        store.save(kept[-1])
        clock.now += 1
    assert [store.load(k.id) is not None for k in kept] == [False, False, True, True, True]
    assert len(list(tmp_path.glob("*.json"))) == 3


def test_size_bound_removes_the_oldest_and_refuses_one_too_large(
    tmp_path: Path, clock: Clock
) -> None:
    one = len(json.dumps({"format": 1, **stored("x" * 1000).__dict__}))
    store = ResponseStore(tmp_path, max_bytes=int(one * 2.5), clock=clock)
    kept = []
    for _ in range(4):
        kept.append(stored("x" * 1000))
        store.save(kept[-1])
        clock.now += 1
    assert [store.load(k.id) is not None for k in kept] == [False, False, True, True]
    assert sum(p.stat().st_size for p in tmp_path.glob("*.json")) <= store.max_bytes
    huge = stored("x" * one * 3)
    assert store.save(huge) is False
    assert store.load(huge.id) is None
    assert store.load(kept[-1].id) is not None  # the others stay


def test_a_damaged_file_is_not_found_and_removed(store: ResponseStore) -> None:
    kept = stored()
    store.save(kept)
    path = store.root / f"{kept.id}.json"
    path.write_text('{"format": 1, "response": {"id": "resp_x"')
    assert store.load(kept.id) is None
    assert not path.exists()
    other = stored()
    store.save(other)
    path = store.root / f"{other.id}.json"
    path.write_text(json.dumps({"response": {"id": new_id("resp")}, "context": []}))
    assert store.load(other.id) is None  # a file whose inside names another id


def test_stale_temporary_files_are_cleaned_up(tmp_path: Path, clock: Clock) -> None:
    tmp_path.mkdir(exist_ok=True)
    stale, fresh = tmp_path / ".resp_a.1234.tmp", tmp_path / ".resp_b.5678.tmp"
    for path, age in ((stale, 7200), (fresh, 60)):
        path.write_text("{")
        os.utime(path, (clock.now - age, clock.now - age))
    store = ResponseStore(tmp_path, clock=clock)
    assert store.load(new_id("resp")) is None  # the first use reads the folder
    assert not stale.exists() and fresh.exists()


def test_a_disk_that_refuses_the_write_is_logged_not_raised(
    tmp_path: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    store = ResponseStore(blocker / "responses", clock=clock)
    assert store.save(stored()) is False
    assert "could not store response" in caplog.text
