"""A damaged model folder is a 422 naming the file and the damage, never a 500 with internals.

Issue 25, finding 8: config files that are not JSON, IR files cut short or empty, a weights
file from another model... reached GenAI, whose C++ JSON parser and OpenVINO's IR reader
answered ``500 could not load x: [json.exception.parse_error.101] ...`` or ``Exception from
src/inference/src/cpp/core.cpp:84:``. The store's checker (:mod:`engine.ir_check`) now finds
each damage before a worker loads the model, and the worker maps what OpenVINO alone finds
(weights of the right size holding other bytes) to the same 422 without its text.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from engine.models import ModelError, ModelSpec
from engine.settings import load_settings
from engine.store import ModelStore
from engine.supervisor.states import ERROR, READY
from engine.worker.embeddings import EmbeddingRunner, EmbedJob
from tests.conftest import TINY_CODER, TINY_MODEL
from tests.engine.test_client import make_client
from tests.server.harness import (
    TINY_EMBED,
    running_server,
    store_embedding_model,
    store_rerank_model,
)
from tests.store.test_store import add_demo

Damage = Callable[[Path], None]  # (model folder) -> None


def _bytes(name: str, data: bytes) -> Damage:
    return lambda folder: (folder / name).write_bytes(data)


def _cut(name: str) -> Damage:
    def damage(folder: Path) -> None:
        path = folder / name
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    return damage


def _gone(name: str) -> Damage:
    return lambda folder: (folder / name).unlink()


def _padded(name: str) -> Damage:
    def damage(folder: Path) -> None:
        with (folder / name).open("ab") as fh:
            fh.write(b"\0" * 4096)

    return damage


def _other_model(folder: Path) -> None:
    shutil.copyfile(TINY_CODER / "openvino_model.bin", folder / "openvino_model.bin")


def _noise(folder: Path) -> None:
    path = folder / "openvino_model.bin"
    path.write_bytes(os.urandom(path.stat().st_size))


# kind -> (damage, the file the answer must name, what it must say about it)
KINDS: dict[str, tuple[Damage, str, str]] = {
    "config.json not JSON": (_bytes("config.json", b"{nope"), "config.json", "not valid JSON"),
    "config.json not UTF-8": (
        _bytes("config.json", b'{"model_type": "qwen2\xff"}'),
        "config.json",
        "not UTF-8",
    ),
    "config.json a list": (_bytes("config.json", b"[1, 2]"), "config.json", "not hold a JSON"),
    "config.json empty": (_bytes("config.json", b""), "config.json", "is empty"),
    "tokenizer_config.json not JSON": (
        _bytes("tokenizer_config.json", b'{"chat_template": '),
        "tokenizer_config.json",
        "not valid JSON",
    ),
    "generation_config.json not JSON": (
        _bytes("generation_config.json", b"{nope"),
        "generation_config.json",
        "not valid JSON",
    ),
    "generation_config.json a list": (
        _bytes("generation_config.json", b"[1]"),
        "generation_config.json",
        "not hold a JSON",
    ),
    "model xml empty": (_bytes("openvino_model.xml", b""), "openvino_model.xml", "is empty"),
    "model xml cut short": (_cut("openvino_model.xml"), "openvino_model.xml", "not valid XML"),
    "model xml not XML": (_bytes("openvino_model.xml", b"hello"), "openvino_model.xml", "XML"),
    "model xml not an IR": (
        _bytes("openvino_model.xml", b"<html></html>"),
        "openvino_model.xml",
        "not an OpenVINO IR",
    ),
    "model xml with entities": (
        _bytes(
            "openvino_model.xml",
            b'<!DOCTYPE net [<!ENTITY a "aaaa">]><net>&a;</net>',
        ),
        "openvino_model.xml",
        "declares a DTD",
    ),
    "model bin empty": (_bytes("openvino_model.bin", b""), "openvino_model.bin", "is empty"),
    "model bin cut short": (_cut("openvino_model.bin"), "openvino_model.bin", "is cut short"),
    "model bin missing": (_gone("openvino_model.bin"), "openvino_model.bin", "missing"),
    "model bin of a smaller model": (_other_model, "openvino_model.bin", "is cut short"),
    "model bin longer than its xml": (
        _padded("openvino_model.bin"),
        "openvino_model.bin",
        "does not match openvino_model.xml",
    ),
    "tokenizer xml cut short": (
        _cut("openvino_tokenizer.xml"),
        "openvino_tokenizer.xml",
        "not valid XML",
    ),
    "tokenizer bin empty": (
        _bytes("openvino_tokenizer.bin", b""),
        "openvino_tokenizer.bin",
        "is empty",
    ),
    "tokenizer bin missing": (
        _gone("openvino_tokenizer.bin"),
        "openvino_tokenizer.bin",
        "is missing",
    ),
    "detokenizer xml empty": (
        _bytes("openvino_detokenizer.xml", b""),
        "openvino_detokenizer.xml",
        "is empty",
    ),
    "detokenizer bin cut short": (
        _cut("openvino_detokenizer.bin"),
        "openvino_detokenizer.bin",
        "is cut short",
    ),
}
# Only OpenVINO sees this one (the size is right, the bytes are noise): the worker's answer.
NOISE = "model bin of the right size, other bytes"
_INTERNALS = ("core.cpp", "json.exception", "Exception from", ".cpp:", "Traceback", "pugi")


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_store_names_each_damage_before_a_load(kind: str, store: ModelStore) -> None:
    damage, name, what = KINDS[kind]
    damage(add_demo(store, "broken"))
    with pytest.raises(ModelError) as refused:
        store.spec_to_load("broken")
    assert name in str(refused.value) and what in str(refused.value), refused.value


def test_every_damaged_folder_is_a_422_naming_the_file(sidelight_home: Path) -> None:
    """A real server, one store entry per damage: each request is a 422 ``model_damaged``
    naming the file and the damage, with no library text, and no worker crashed."""
    store = ModelStore(sidelight_home / "models")
    ids: dict[str, str] = {}
    for index, (kind, (damage, _, _)) in enumerate(KINDS.items()):
        ids[kind] = f"broken-{index}"
        damage(add_demo(store, ids[kind]))
    ids[NOISE] = "noise"
    _noise(add_demo(store, "noise"))
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    with running_server(sidelight_home, TINY_MODEL) as server:
        url = server.base_url
        for kind, model_id in ids.items():
            reply = httpx.post(
                f"{url}/v1/chat/completions", json={**chat, "model": model_id}, timeout=120
            )
            assert reply.status_code == 422, (kind, reply.text)
            error = reply.json()["error"]
            assert (error["code"], error["param"]) == ("model_damaged", "model"), kind
            message = error["message"]
            assert f"the model '{model_id}' is damaged" in message, (kind, message)
            if kind == NOISE:
                assert "OpenVINO could not read" in message, message
            else:
                name, what = KINDS[kind][1:]
                assert name in message and what in message, (kind, message)
            assert not any(word in reply.text for word in _INTERNALS), (kind, reply.text)
        health = server.health().json()
        assert health["restarts"] == 0, health
        served = httpx.post(f"{url}/v1/chat/completions", json={**chat, "model": "sidelight-demo"})
        assert served.status_code == 200, served.text


def test_the_worker_checks_the_files_itself_and_says_which(
    sidelight_home: Path, tmp_path: Path
) -> None:
    """A folder damaged after the server's check (or reloaded after a crash) is refused by
    the worker's own check: the status names the file, flags the damage and keeps out the
    library's text; the worker then loads a good model."""
    broken = tmp_path / "broken"
    shutil.copytree(TINY_MODEL, broken)
    _cut("openvino_model.xml")(broken)
    client = make_client(sidelight_home)
    client.start()
    try:
        client.load(ModelSpec(id="broken", path=broken, format="ir"))
        status = client.wait_for({READY, ERROR}, 60)
        assert status.state == ERROR and status.damaged, status
        assert "openvino_model.xml is not valid XML" in status.damaged
        assert status.message and status.message.startswith("could not load broken: ")
        assert not any(word in status.message for word in _INTERNALS), status.message
    finally:
        client.close()


def test_a_damaged_encoder_is_a_422_and_its_worker_checks_too(
    sidelight_home: Path, tmp_path: Path
) -> None:
    """Embedding and rerank models: the server checks their files before a job (they used
    to go straight to GenAI, whose IR reader answered a 500 with ``core.cpp``), and the
    worker checks again when it loads one (a folder damaged after the server's check is a
    422 ``model_damaged`` too, not a 500)."""
    store_embedding_model(sidelight_home, "embed-cut")
    store_rerank_model(sidelight_home, "rerank-empty")
    models = load_settings({"SIDELIGHT_HOME": str(sidelight_home)}).paths.models_dir
    _cut("openvino_model.bin")(models / "embed-cut")
    _bytes("openvino_tokenizer.xml", b"")(models / "rerank-empty")
    with running_server(sidelight_home, TINY_MODEL) as server:
        url = server.base_url
        for path, body, name, what in (
            ("/v1/embeddings", {"model": "embed-cut", "input": "hi"}, "openvino_model.bin", "cut"),
            (
                "/v1/rerank",
                {"model": "rerank-empty", "query": "q", "documents": ["d"]},
                "openvino_tokenizer.xml",
                "is empty",
            ),
        ):
            reply = httpx.post(f"{url}{path}", json=body, timeout=120)
            assert reply.status_code == 422, (path, reply.text)
            error = reply.json()["error"]
            assert (error["code"], error["param"]) == ("model_damaged", "model"), reply.text
            assert name in error["message"] and what in error["message"], error["message"]
            assert not any(word in reply.text for word in _INTERNALS), reply.text
    # The worker's own check, on a folder damaged after the server's.
    broken = tmp_path / "embed"
    shutil.copytree(TINY_EMBED, broken)
    _cut("openvino_model.xml")(broken)
    runner = EmbeddingRunner()
    spec = ModelSpec(id="embed", path=broken, format="ir", task="embeddings")
    job = EmbedJob(1, spec, "CPU", ("hi",))
    with pytest.raises(ModelError, match=r"openvino_model\.xml is not valid XML"):
        runner.run_chunk(job)
