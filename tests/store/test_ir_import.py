"""``sidelight import FOLDER`` (engine.store.ir_import) on the tiny vision model: a copy in the
store whose manifest says it sees; a damaged folder or a taken id leaves nothing behind."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.models import ModelError
from engine.store import ModelStore, StoreError
from engine.store.ir_import import import_ir_folder

TINY_VLM = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-vlm"
pytestmark = pytest.mark.skipif(
    not TINY_VLM.is_dir(), reason="the tiny vision fixture is not built"
)


def test_a_vision_folder_is_stored_as_a_copy_that_sees(store: ModelStore) -> None:
    stored = import_ir_folder(store, TINY_VLM, model_id="My-VLM")
    manifest = stored.manifest
    assert (stored.id, manifest.task, manifest.format) == ("my-vlm", "vision", "ir")
    assert manifest.capabilities["vision"] is True and manifest.context_length == 4096
    assert stored.path != TINY_VLM and not any(p.is_symlink() for p in stored.path.iterdir())
    assert store.spec_to_load("my-vlm").task == "vision"
    with pytest.raises(StoreError, match="already in the store"):
        import_ir_folder(store, TINY_VLM, model_id="my-vlm")


def test_a_damaged_folder_is_refused_before_any_copy(store: ModelStore, tmp_path: Path) -> None:
    broken = shutil.copytree(TINY_VLM, tmp_path / "broken-vlm")
    (broken / "openvino_language_model.bin").write_bytes(b"\0" * 100)
    with pytest.raises(ModelError, match=r"openvino_language_model\.bin"):
        import_ir_folder(store, broken)
    assert [m.id for m in store.list()] == []


@pytest.mark.parametrize(
    ("config", "task"),
    [
        ({"architectures": ["Qwen2VLForConditionalGeneration"], "vision_config": {}}, "image-text-to-text"),
        ({"architectures": ["Qwen2ForCausalLM"]}, "text-generation-with-past"),
        ({"architectures": ["BertModel"]}, "feature-extraction"),
    ],
)  # fmt: skip
def test_convert_exports_a_vision_checkpoint_as_image_text_to_text(
    tmp_path: Path, config: dict[str, object], task: str
) -> None:
    import json

    from engine.store.convert import ConvertRequest, _task

    (tmp_path / "config.json").write_text(json.dumps(config))
    assert _task(ConvertRequest(source=str(tmp_path)), None, None) == task
