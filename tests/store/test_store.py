"""The store's folders: ids that cannot escape it, manifests, atomic add, delete, list."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from engine.models import ModelError
from engine.store import ModelStore, StoreError
from engine.store.errors import InvalidModelId, ModelDamaged, ModelNotFound
from engine.store.ids import id_from_name, normalize_id
from engine.store.manifest import MANIFEST, Manifest, Source
from tests.store.conftest import TINY_MODEL, sidelight

PATH_LIKE = ["../x", "/etc", "a/../../b", "..", ".", "a/b", "a\\b", "", " ", ".partial", "C:x"]


def add_demo(store: ModelStore, model_id: str = "demo") -> Path:
    staged = store.partial_folder(model_id)
    shutil.copytree(TINY_MODEL, staged)
    manifest = Manifest(
        id=model_id,
        name="Demo",
        format="ir",
        entry=".",
        source=Source(kind="hub", repo="OpenVINO/demo", revision="0" * 40),
        size_bytes=1,
    )
    return store.commit(staged, manifest).folder


@pytest.mark.parametrize("bad", PATH_LIKE)
def test_path_like_ids_are_refused_by_every_call(store: ModelStore, bad: str) -> None:
    add_demo(store)
    calls = [
        store.get,
        store.spec,
        store.remove,
        store.contains,
        store.partial_folder,
        store.has_partial,
        store.discard_partial,
        lambda i: store.lock(i).__enter__(),
    ]
    for call in calls:
        with pytest.raises(InvalidModelId):
            call(bad)
    assert [m.id for m in store.list()] == ["demo"]
    assert (store.root / "demo" / MANIFEST).is_file()


def test_links_out_of_the_store_are_refused(store: ModelStore, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    shutil.copytree(TINY_MODEL, outside)
    (outside / MANIFEST).write_text(
        json.dumps({"id": "sneaky", "format": "ir", "source": {"kind": "hub"}})
    )
    store.root.mkdir(parents=True, exist_ok=True)
    os.symlink(outside, store.root / "sneaky")
    with pytest.raises(InvalidModelId, match="link"):
        store.get("sneaky")
    with pytest.raises(InvalidModelId):
        store.remove("sneaky")
    assert store.list() == []
    assert outside.is_dir()  # nothing outside was touched


def test_manifest_entry_cannot_point_outside_its_folder(store: ModelStore) -> None:
    folder = add_demo(store)
    data = json.loads((folder / MANIFEST).read_text())
    data["entry"] = "../../../etc"
    (folder / MANIFEST).write_text(json.dumps(data))
    with pytest.raises(ModelDamaged, match="not a path inside the model folder"):
        store.get("demo")
    with pytest.raises(ModelDamaged):
        store.spec("demo")


def test_ids_are_case_insensitive_and_derived_from_names() -> None:
    assert normalize_id("Qwen2.5-1.5B") == "qwen2.5-1.5b"
    assert id_from_name("OpenVINO/Qwen2.5-1.5B-Instruct-int4-ov") == "qwen2.5-1.5b-instruct-int4-ov"
    assert id_from_name("My Model (v2)..gguf") == "my-model-v2-.gguf"
    assert id_from_name("../..") == "model"


def test_list_get_resolve_remove(store: ModelStore, tmp_path: Path) -> None:
    assert store.list() == []
    folder = add_demo(store, "demo")
    (store.root / "half-written").mkdir()  # no manifest: not a model
    (store.root / "half-written" / "openvino_model.xml").write_text("<net/>")
    assert [m.id for m in store.list()] == ["demo"]
    assert store.get("DEMO").folder == folder
    assert store.resolve("demo").path == folder
    assert store.resolve(str(TINY_MODEL)).path == TINY_MODEL.resolve()
    with pytest.raises(ModelError, match="neither a model in the store"):
        store.resolve("nothing-here")
    with pytest.raises(ModelError, match="neither a model in the store"):
        store.resolve("../nothing")
    with pytest.raises(StoreError, match="already in the store"):
        add_demo(store, "demo")
    store.remove("demo")
    assert store.list() == [] and not folder.exists()
    with pytest.raises(ModelNotFound):
        store.remove("demo")


def test_a_second_job_on_the_same_id_is_refused(store: ModelStore) -> None:
    with store.lock("demo"), pytest.raises(StoreError, match="another job"), store.lock("demo"):
        pass


def test_cli_list_and_rm(sidelight_home: Path) -> None:
    store = ModelStore(sidelight_home / "models")
    add_demo(store, "demo")
    listed = sidelight(sidelight_home, "list")
    assert listed.returncode == 0 and "demo" in listed.stdout and "ir" in listed.stdout
    for bad in ("../x", "/etc", "a/../../b"):
        refused = sidelight(sidelight_home, "rm", bad)
        assert refused.returncode == 2 and "not a valid model id" in refused.stderr
    missing = sidelight(sidelight_home, "rm", "nope")
    assert missing.returncode == 1 and "no model 'nope'" in missing.stderr
    removed = sidelight(sidelight_home, "rm", "demo")
    assert removed.returncode == 0 and store.list() == []
    empty = sidelight(sidelight_home, "list")
    assert "no models yet" in empty.stdout


def test_folder_size_counts_what_stays_and_tolerates_what_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conversion's progress measures its staging folder while the child writes and
    removes temporary files in it: one gone between its listing and its stat counts
    nothing, never an error (it failed a whole conversion in CI)."""
    import os

    from engine.store import facts

    (tmp_path / "a.bin").write_bytes(b"x" * 10)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.bin").write_bytes(b"y" * 5)
    (tmp_path / "link").symlink_to(tmp_path / "a.bin")
    assert facts.folder_size(tmp_path) == 15
    real = os.lstat

    def racing(path: str) -> os.stat_result:
        if path.endswith("b.bin"):
            raise FileNotFoundError(path)  # the child removed it just now
        return real(path)

    monkeypatch.setattr(facts.os, "lstat", racing)
    assert facts.folder_size(tmp_path) == 10
