"""Importing GGUF files: refused up front when GenAI cannot load them, served when it can."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from engine.models import ModelError
from engine.store import ModelStore
from engine.store.errors import StoreError
from engine.store.gguf_import import import_gguf
from tests.conftest import TINY_GGUF
from tests.engine.gguf_builder import CRAFTED, load
from tests.engine.test_models import write_gguf
from tests.store.conftest import assert_completes, serving, sidelight


def test_cli_imports_a_gguf_and_serves_it_by_id(tiny_gguf: Path, sidelight_home: Path) -> None:
    done = sidelight(sidelight_home, "import", str(tiny_gguf), "--id", "demo-gguf")
    assert done.returncode == 0, done.stderr
    assert "added demo-gguf (gguf" in done.stdout
    listed = json.loads(sidelight(sidelight_home, "list", "--json").stdout)
    assert [(m["id"], m["format"], m["weights"], m["architecture"]) for m in listed] == [
        ("demo-gguf", "gguf", "F16", "qwen2")
    ]
    stored = Path(listed[0]["path"])
    assert stored.read_bytes() == tiny_gguf.read_bytes()
    assert stored.is_relative_to(sidelight_home / "models" / "demo-gguf")

    with serving(sidelight_home, "demo-gguf") as url:
        models = httpx.get(f"{url}/v1/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == ["demo-gguf"]
        assert_completes(url, "demo-gguf", 3)


def test_save_ir_stores_an_ir_folder_next_to_the_gguf(tiny_gguf: Path, store: ModelStore) -> None:
    model = import_gguf(store, tiny_gguf, save_ir=True)
    assert model.manifest.format == "ir" and model.manifest.details["ir_saved"]
    assert (model.folder / tiny_gguf.name).is_file()
    spec = model.spec()
    assert (spec.format, spec.architecture) == ("ir", "qwen2")
    assert spec.context_length == model.manifest.context_length and spec.context_length


def test_unsupported_gguf_is_refused_before_anything_is_copied(
    tmp_path: Path, store: ModelStore, sidelight_home: Path
) -> None:
    gpt2 = write_gguf(tmp_path / "gpt2.gguf", general__architecture="gpt2", general__file_type=1)
    with pytest.raises(ModelError, match=r"architecture 'gpt2' is not supported"):
        import_gguf(store, gpt2)
    iq2 = write_gguf(tmp_path / "iq2.gguf", general__architecture="llama", general__file_type=20)
    refused = sidelight(sidelight_home, "import", str(iq2))
    assert refused.returncode == 2 and "quantization type 20 is not supported" in refused.stderr
    assert store.list() == []
    assert not (store.root / ".partial").exists() or not any((store.root / ".partial").iterdir())


def test_an_id_is_never_taken_twice(tiny_gguf: Path, store: ModelStore) -> None:
    import_gguf(store, tiny_gguf, model_id="one")
    with pytest.raises(StoreError, match=r"'one' is already in the store"):
        import_gguf(store, tiny_gguf, model_id="One")


@pytest.mark.parametrize("kind", list(CRAFTED))
def test_every_crafted_gguf_is_refused_before_anything_is_copied(
    kind: str, tmp_path: Path, store: ModelStore
) -> None:
    craft, expected = CRAFTED[kind]
    path = tmp_path / "model.gguf"
    path.write_bytes(craft(load(TINY_GGUF)))
    with pytest.raises(ModelError, match=re.escape(expected)):
        import_gguf(store, path)
    assert store.list() == []


# Kinds that crashed the engine worker (SIGSEGV/SIGFPE) or served garbage before.
_WORKER_KILLERS = ("tensor count 2^63", "n_dims 2^31", "offset past the end", "data cut in half")


def test_cli_import_and_serve_refuse_crafted_files_with_one_line(
    tmp_path: Path, sidelight_home: Path
) -> None:
    for kind in _WORKER_KILLERS:
        craft, expected = CRAFTED[kind]
        path = tmp_path / "model.gguf"
        path.write_bytes(craft(load(TINY_GGUF)))
        for command in (("import", str(path)), ("serve", "--model", str(path), "--port", "0")):
            done = sidelight(sidelight_home, *command)
            assert done.returncode == 2, (kind, command, done.stderr)
            last = done.stderr.strip().splitlines()[-1]
            assert last.startswith("sidelight: model.gguf is not a valid GGUF file: "), last
            assert expected in last and "Traceback" not in done.stderr


def test_a_stored_gguf_damaged_later_is_refused_before_the_worker_opens_it(
    tmp_path: Path, store: ModelStore, sidelight_home: Path
) -> None:
    copy = tmp_path / "demo.gguf"
    copy.write_bytes(TINY_GGUF.read_bytes())
    stored = import_gguf(store, copy, model_id="demo-gguf")
    data = stored.path.read_bytes()
    stored.path.unlink()  # a fresh file: the import may have hard-linked the copy
    stored.path.write_bytes(data[: len(data) // 2])
    done = sidelight(sidelight_home, "serve", "--model", "demo-gguf", "--port", "0")
    assert done.returncode == 2, done.stderr
    assert "demo.gguf is not a valid GGUF file" in done.stderr
    assert "(the download may be incomplete)" in done.stderr and "Traceback" not in done.stderr
