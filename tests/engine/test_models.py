"""Model specs from disk: IR folders and GGUF files, refused up front when unservable."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.gguf import GGUFError, read_metadata
from engine.models import ModelError, read_json, spec_from_path
from tests.conftest import TINY_GGUF
from tests.engine.gguf_builder import load, with_metadata


def write_gguf(path: Path, **meta: str | int) -> Path:
    """Write the demo model's GGUF with metadata changed (``general__file_type=2``)."""
    return with_metadata(load(TINY_GGUF), **meta).write(path)


def test_tiny_ir_model(tiny_model: Path) -> None:
    spec = spec_from_path(tiny_model)
    assert spec.format == "ir"
    assert spec.id == "sidelight-demo"
    assert spec.context_length and spec.context_length >= 512
    assert spec.architecture == "qwen2"
    assert spec.is_demo


def test_tiny_gguf(tiny_gguf: Path) -> None:
    spec = spec_from_path(tiny_gguf)
    assert spec.format == "gguf"
    assert spec.architecture == "qwen2"
    assert (
        spec.context_length
        == spec_from_path(
            tiny_gguf.parent.parent.parent / "resources" / "models" / "sidelight-demo"
        ).context_length
    )


def test_unsupported_architecture_is_refused(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "gpt2.gguf", general__architecture="gpt2", general__file_type=1)
    with pytest.raises(ModelError, match=r"architecture .gpt2. is not supported"):
        spec_from_path(path)


def test_unsupported_quantization_is_refused(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "iq2.gguf", general__architecture="llama", general__file_type=20)
    with pytest.raises(ModelError, match=r"quantization type 20"):
        spec_from_path(path)


def test_supported_header_reads(tmp_path: Path) -> None:
    path = write_gguf(
        tmp_path / "ok.gguf",
        general__architecture="qwen3",
        general__file_type=2,
        qwen3__context_length=4096,
    )
    spec = spec_from_path(path)
    assert (spec.architecture, spec.context_length, spec.id) == ("qwen3", 4096, "ok")


def test_not_a_gguf(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE" + b"\0" * 32)
    with pytest.raises(GGUFError, match="not a GGUF"):
        read_metadata(bad)
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(
        write_gguf(tmp_path / "x.gguf", general__architecture="llama").read_bytes()[:30]
    )
    with pytest.raises(
        ModelError, match=r"claims 25 metadata entries, more than the file can hold"
    ):
        spec_from_path(truncated)


def test_folder_without_model_files(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"missing openvino_model\.xml"):
        spec_from_path(tmp_path)
    with pytest.raises(ModelError, match="no model"):
        spec_from_path(tmp_path / "absent")
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ModelError, match=r"\.gguf"):
        spec_from_path(tmp_path / "weights.bin")


def test_config_json_that_is_not_utf8_reads_as_empty(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_bytes(b'{"model_type": "qwen2\xff\xfe"}')
    assert read_json(tmp_path / "config.json") == {}


def _vlm_folder(tmp_path: Path, config: dict[str, object]) -> Path:
    """A folder shaped like optimum-intel's image-text-to-text export (files' names only)."""
    import json

    for stem in (
        "openvino_language_model",
        "openvino_vision_embeddings_model",
        "openvino_text_embeddings_model",
    ):
        (tmp_path / f"{stem}.xml").write_text("<net/>")
        (tmp_path / f"{stem}.bin").write_bytes(b"")
    for name in ("openvino_tokenizer.xml", "openvino_detokenizer.xml"):
        (tmp_path / name).write_text("<net/>")
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_a_vision_language_folder_is_a_vision_model(tmp_path: Path) -> None:
    config = {
        "model_type": "qwen2_vl",
        "architectures": ["Qwen2VLForConditionalGeneration"],
        "vision_config": {"depth": 2},
        "text_config": {"max_position_embeddings": 4096, "num_hidden_layers": 2},
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "hidden_size": 64,
    }
    spec = spec_from_path(_vlm_folder(tmp_path, config))
    assert (spec.task, spec.format, spec.architecture) == ("vision", "ir", "qwen2_vl")
    assert spec.context_length == 4096


def test_a_vision_language_folder_needs_its_vision_config_and_files(tmp_path: Path) -> None:
    folder = _vlm_folder(tmp_path, {"model_type": "qwen2_vl"})
    with pytest.raises(ModelError, match=r"needs a config\.json with 'vision_config'"):
        spec_from_path(folder)
    (folder / "openvino_vision_embeddings_model.bin").unlink()
    with pytest.raises(ModelError, match=r"missing openvino_vision_embeddings_model\.bin"):
        spec_from_path(folder)


TINY_VLM = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-vlm"


@pytest.mark.skipif(not TINY_VLM.is_dir(), reason="the tiny vision fixture is not built")
def test_a_damaged_vision_encoder_is_named_before_a_load(tmp_path: Path) -> None:
    import shutil

    from engine.models import verify_files

    folder = shutil.copytree(TINY_VLM, tmp_path / "tiny-vlm")
    spec = spec_from_path(folder)
    verify_files(spec)  # whole: every IR pair checks out
    weights = folder / "openvino_vision_embeddings_model.bin"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ModelError, match=r"openvino_vision_embeddings_model\.bin is cut short"):
        verify_files(spec)
