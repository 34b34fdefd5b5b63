"""One damaged store entry never breaks the others: skipped, shown as damaged, removable.

A manifest is a file anyone may edit or a crash may damage: a ``capabilities`` list, an
``entry`` that climbs out of its folder, a link to a file elsewhere or a ``config.json`` that
is not UTF-8 once made ``sidelight list`` print a traceback and ``/v1/models``, ``/api/tags``
and ``/api/v0/models`` answer 500 for everyone.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.store import ModelStore
from engine.store.errors import ModelDamaged
from engine.store.manifest import MANIFEST
from tests.conftest import TINY_GGUF
from tests.server.harness import running_server
from tests.store.conftest import sidelight
from tests.store.test_store import add_demo
from tests.waiting import wait_until

Damage = Callable[[Path, dict[str, Any]], None]  # (model folder, manifest data) -> None


def _field(key: str, value: object) -> Damage:
    def damage(folder: Path, data: dict[str, Any]) -> None:
        data[key] = value
        (folder / MANIFEST).write_text(json.dumps(data))

    return damage


def _raw(content: bytes) -> Damage:
    def damage(folder: Path, data: dict[str, Any]) -> None:
        (folder / MANIFEST).write_bytes(content)

    return damage


def _link(name: str) -> Damage:
    def damage(folder: Path, data: dict[str, Any]) -> None:
        target = folder.parent.parent / "secret.txt"
        target.write_text("not a model file")
        (folder / name).unlink(missing_ok=True)
        (folder / name).symlink_to(target)

    return damage


DAMAGES: dict[str, tuple[Damage, str]] = {
    "capabilities is a list": (
        _field("capabilities", ["tools"]),
        "'capabilities' should be an object of true/false values, not a list ['tools']",
    ),
    "capabilities is a string": (
        _field("capabilities", "tools"),
        "'capabilities' should be an object of true/false values, not text 'tools'",
    ),
    "capability is not true/false": (
        _field("capabilities", {"tools": "yes"}),
        "'capabilities' should be an object of true/false values",
    ),
    "entry is absolute": (_field("entry", "/etc"), "'entry' '/etc' is not a path inside"),
    "entry climbs out": (_field("entry", "../../etc"), "'entry' '../../etc' is not a path inside"),
    "entry is missing": (_field("entry", "gone"), "its folder gone is missing"),
    "gguf entry is a folder path": (
        lambda f, d: _field("format", "gguf")(f, {**d, "entry": "sub/model.gguf"}),
        "'entry' 'sub/model.gguf' should name the model's .gguf file",
    ),
    "format unknown": (_field("format", "onnx"), "'format' should be 'ir' or 'gguf'"),
    "size is text": (_field("size_bytes", "big"), "'size_bytes' should be a whole number"),
    "context length negative": (_field("context_length", -5), "'context_length' should be"),
    "devices is a string": (_field("devices", "CPU"), "'devices' should be a list of text"),
    "source is null": (_field("source", None), "'source' should be an object, not null"),
    "source kind unknown": (_field("source", {"kind": "ftp"}), "'source.kind' should be"),
    "details is a list": (_field("details", []), "'details' should be an object"),
    "id of another folder": (_field("id", "other"), "manifest.json names 'other'"),
    "not JSON": (_raw(b"{nope"), "manifest.json is not valid JSON"),
    "not UTF-8": (_raw(b'{"id": "\xff\xfe"}'), "manifest.json is not UTF-8 text"),
    "a JSON list": (_raw(b"[1, 2]"), "manifest.json does not hold a JSON object"),
    "no id": (_raw(b'{"format": "ir", "source": {"kind": "hub"}}'), "has no 'id'"),
    "weights file links outside": (
        _link("openvino_model.bin"),
        "openvino_model.bin is a link to a file outside the model folder",
    ),
    "manifest links outside": (
        _link(MANIFEST),
        "manifest.json is a link to a file outside the model folder",
    ),
}


def _damaged_store(root: Path, kind: str) -> ModelStore:
    store = ModelStore(root)
    add_demo(store, "demo")
    folder = add_demo(store, "broken")
    data = json.loads((folder / MANIFEST).read_text())
    DAMAGES[kind][0](folder, data)
    return store


@pytest.mark.parametrize("kind", list(DAMAGES))
def test_a_damaged_entry_is_skipped_named_and_removable(
    kind: str, store: ModelStore, caplog: pytest.LogCaptureFixture
) -> None:
    store = _damaged_store(store.root, kind)
    expected = DAMAGES[kind][1]
    models, damaged = store.scan()
    assert [m.id for m in models] == ["demo"]
    assert [(d.id, expected in d.reason) for d in damaged] == [("broken", True)], damaged
    assert [m.id for m in store.list()] == ["demo"]
    assert "broken" in caplog.text and expected in caplog.text
    with pytest.raises(ModelDamaged, match="sidelight rm broken"):
        store.get("broken")
    store.remove("broken")
    assert not (store.root / "broken").exists()
    assert store.scan()[1] == [] and [m.id for m in store.list()] == ["demo"]
    assert (store.root.parent / "secret.txt").exists() or "link" not in kind


def test_cli_lists_damaged_entries_and_removes_them(sidelight_home: Path) -> None:
    store = _damaged_store(sidelight_home / "models", "capabilities is a list")
    (store.root / "cut-gguf").mkdir()
    stored_gguf = store.root / "cut-gguf" / "cut.gguf"
    stored_gguf.write_bytes(TINY_GGUF.read_bytes()[:-1])
    (store.root / "cut-gguf" / MANIFEST).write_text(
        json.dumps(
            {"id": "cut-gguf", "format": "gguf", "entry": "cut.gguf", "source": {"kind": "gguf"}}
        )
    )
    listed = sidelight(sidelight_home, "list")
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()[1:]}
    assert " ir " in rows["demo"]
    assert "damaged: manifest.json: 'capabilities' should be an object" in rows["broken"]
    assert "damaged: cut.gguf is not a valid GGUF file" in rows["cut-gguf"]
    assert "remove a damaged model with: sidelight rm ID" in listed.stdout
    as_json = json.loads(sidelight(sidelight_home, "list", "--json").stdout)
    assert [(m["id"], "damaged" in m) for m in as_json] == [
        ("broken", True),
        ("cut-gguf", True),
        ("demo", False),
    ]
    for model_id in ("broken", "cut-gguf"):
        removed = sidelight(sidelight_home, "rm", model_id)
        assert removed.returncode == 0 and f"removed {model_id}" in removed.stdout, removed.stderr
    assert [m.id for m in store.list()] == ["demo"] and store.scan()[1] == []


def test_the_server_lists_around_damaged_entries(
    sidelight_home: Path, tiny_model: Path, tmp_path: Path
) -> None:
    store = ModelStore(sidelight_home / "models")
    add_demo(store, "demo")
    for kind in ("capabilities is a list", "capabilities is a string", "entry climbs out"):
        folder = add_demo(store, kind.replace(" ", "-"))
        data = json.loads((folder / MANIFEST).read_text())
        DAMAGES[kind][0](folder, {**data, "id": folder.name})
    bad_config = add_demo(store, "bad-config")  # servable, but its config.json is not UTF-8
    (bad_config / "config.json").write_bytes(b'{"model_type": "qwen2\xff"}')
    model = tmp_path / "loaded"
    shutil.copytree(tiny_model, model)
    with running_server(sidelight_home, model) as server:
        url = server.base_url
        openai_ids = [
            m["id"] for m in httpx.get(f"{url}/v1/models").raise_for_status().json()["data"]
        ]
        ollama = httpx.get(f"{url}/api/tags").raise_for_status().json()["models"]
        lmstudio = httpx.get(f"{url}/api/v0/models").raise_for_status().json()["data"]
        assert sorted(openai_ids) == ["bad-config", "demo", "loaded"]
        assert sorted(m["name"].removesuffix(":latest") for m in ollama) == [
            "bad-config",
            "demo",
            "loaded",
        ]
        assert sorted(m["id"] for m in lmstudio) == ["bad-config", "demo", "loaded"]
        for damaged in ("capabilities-is-a-list", "entry-climbs-out"):
            card = httpx.get(f"{url}/v1/models/{damaged}")
            assert card.status_code == 404, card.text
    assert "skipping the damaged model" in server.output()
    assert os.path.exists(store.root / "capabilities-is-a-list")


def test_a_served_gguf_damaged_later_is_refused_before_the_engine_opens_it(
    sidelight_home: Path, tmp_path: Path
) -> None:
    """A GGUF served from a path is remembered for the session; cut short once it was
    unloaded, asking for it again is a 422 naming the damage, not a load of a broken file."""
    store = ModelStore(sidelight_home / "models")
    add_demo(store, "demo")
    gguf = tmp_path / "served.gguf"
    shutil.copyfile(TINY_GGUF, gguf)
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    with running_server(sidelight_home, gguf) as server:
        url = server.base_url
        first = httpx.post(f"{url}/v1/chat/completions", json={**chat, "model": "served"})
        assert first.status_code == 200, first.text
        switched = httpx.post(
            f"{url}/v1/chat/completions", json={**chat, "model": "demo"}, timeout=60
        )
        assert switched.status_code == 200, switched.text
        # Each model has a worker of its own, so "served" is still loaded: unload it.
        unload = {"model": "served", "keep_alive": 0}
        assert httpx.post(f"{url}/api/generate", json=unload, timeout=60).status_code == 200
        wait_until(
            lambda: all(m["id"] != "served" for m in server.health().json()["models"]),
            lambda: f"'served' unloaded: {server.health().json()}",
            60,
        )
        with gguf.open("r+b") as file:
            file.truncate(gguf.stat().st_size // 2)
        again = httpx.post(f"{url}/v1/chat/completions", json={**chat, "model": "served"})
        assert again.status_code == 422, again.text
        error = again.json()["error"]
        assert error["code"] == "model_damaged" and error["param"] == "model"
        assert "not a valid GGUF file" in error["message"]
        health = httpx.get(f"{url}/health").json()
        loaded = {m["id"]: m["state"] for m in health["models"]}
        assert loaded == {"demo": "ready"} and health["restarts"] == 0
