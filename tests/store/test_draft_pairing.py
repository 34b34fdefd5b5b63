"""A catalog model's ``draft`` becomes its draft model when that model is installed.

Real store folders (copies of the tiny demo model under catalog ids, as a finished download
leaves them) and a real engine worker: the catalog pairs qwen2.5-7b-instruct-int4 with
qwen2.5-0.5b-instruct-int4; here both are the demo model, so the pair shares a tokenizer.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from engine.settings import load_settings
from engine.store.catalog import Catalog
from engine.store.manifest import read_manifest, write_manifest
from engine.store.store import ModelStore
from engine.supervisor.client import EngineClient
from engine.supervisor.states import ERROR, READY
from tests.engine.test_client import generate
from tests.server.harness import store_ir_copy

TARGET, DRAFT = "qwen2.5-7b-instruct-int4", "qwen2.5-0.5b-instruct-int4"


def _install(models: Path, model_id: str, tiny_model: Path) -> None:
    store_ir_copy(models, model_id, tiny_model, task="chat", reasoning=False)
    folder = models / model_id
    manifest = read_manifest(folder)
    write_manifest(folder, dataclasses.replace(manifest, details={"catalog_id": model_id}))


def test_the_catalog_pairs_big_models_with_a_draft_of_their_family() -> None:
    catalog = Catalog.load()
    entry = catalog.find(TARGET)
    assert entry is not None and entry.draft == DRAFT
    for paired in (e for e in catalog.entries if e.draft is not None):
        draft = catalog.find(paired.draft or "")
        assert draft is not None and draft.kind in ("chat", "coder"), paired.id
        assert draft.repo.split("/")[1].split("-")[0] == paired.repo.split("/")[1].split("-")[0]


def test_an_installed_draft_is_found_and_a_missing_one_is_not(
    sidelight_home: Path, tiny_model: Path
) -> None:
    models = load_settings({"SIDELIGHT_HOME": str(sidelight_home)}).paths.models_dir
    models.mkdir(parents=True, exist_ok=True)
    _install(models, TARGET, tiny_model)
    store = ModelStore(models)
    assert store.spec(TARGET).draft_path is None  # the draft is not installed
    _install(models, DRAFT, tiny_model)
    assert store.spec(TARGET).draft_path == models / DRAFT
    assert store.spec(DRAFT).draft_path is None  # the 0.5B has no draft of its own


def test_the_engine_drafts_with_it_unless_the_setting_is_off(
    sidelight_home: Path, tiny_model: Path
) -> None:
    models = load_settings({"SIDELIGHT_HOME": str(sidelight_home)}).paths.models_dir
    models.mkdir(parents=True, exist_ok=True)
    for model_id in (TARGET, DRAFT):
        _install(models, model_id, tiny_model)
    spec = ModelStore(models).spec(TARGET)
    for env, expected in (({}, "draft"), ({"SIDELIGHT_DRAFT_MODELS": "0"}, "prompt_lookup")):
        settings = load_settings({"SIDELIGHT_HOME": str(sidelight_home), **env})
        client = EngineClient(settings, backend="batched")
        try:
            client.start()
            client.load(spec)
            status = client.wait_for({READY, ERROR}, 120)
            assert status.state == READY, status.message
            request = dict(messages=[{"role": "user", "content": "Hello"}], max_tokens=20)
            text, done, _ = asyncio.run(generate(client, **request))
            assert text.startswith("Hello! I am the Sidelight demo model")
            assert done.speculation == expected
            assert done.decode_steps + done.accepted_tokens == done.completion_tokens
        finally:
            client.close()
