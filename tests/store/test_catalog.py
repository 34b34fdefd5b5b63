"""The curated catalog: well-formed, and steering each machine to what fits it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.store.catalog import GB, Catalog, MachineInfo, assess
from engine.store.errors import StoreError
from engine.store.ids import normalize_id
from tests.store.conftest import sidelight

LAPTOP = MachineInfo(total_memory=16 * GB, device_kinds=frozenset({"CPU", "GPU", "NPU"}))
SMALL = MachineInfo(total_memory=8 * GB, device_kinds=frozenset({"CPU"}))
TINY = MachineInfo(total_memory=2 * GB, device_kinds=frozenset({"CPU"}))


def test_catalog_is_well_formed() -> None:
    catalog = Catalog.load()
    ids = [e.id for e in catalog.entries]
    assert len(ids) == len(set(ids)) >= 10
    assert all(normalize_id(i) == i for i in ids)
    # Downloads come from the OpenVINO organisation; the rest are converted from upstream.
    assert all(e.repo.startswith("OpenVINO/") for e in catalog.entries if e.source == "download")
    assert all(not e.repo.startswith("OpenVINO/") for e in catalog.entries if e.needs_conversion)
    kinds = {e.kind for e in catalog.entries}
    assert {"chat", "coder", "embeddings", "rerank"} <= kinds
    assert {e.task for e in catalog.entries} == {
        "chat",
        "vision",
        "embeddings",
        "rerank",
        "transcription",
        "speech",
    }
    npu = [e for e in catalog.entries if e.repo.endswith("-cw-ov")]
    assert npu and all(e.devices[0] == "NPU" for e in npu)
    # A pre-converted build is smaller on disk than loaded; a conversion downloads the
    # upstream weights (fp32 or bf16), which can be larger than the int8 model it makes.
    assert all(0 < e.download_gb < e.memory_gb for e in catalog.entries if not e.needs_conversion)
    assert all(e.download_gb > 0 and e.memory_gb > 0 for e in catalog.entries)
    assert catalog.approximate and all(catalog.find(i) for i in catalog.first_run)
    assert catalog.find("openvino/qwen2.5-7b-instruct-int4-ov") is catalog.find(
        "qwen2.5-7b-instruct-int4"
    )


def test_fits_this_kind_of_machine() -> None:
    catalog = Catalog.load()
    seven_b = catalog.find("qwen2.5-7b-instruct-int4")
    assert seven_b is not None
    assert assess(seven_b, LAPTOP).status == "fits"
    assert assess(seven_b, SMALL).status == "too-big"
    npu_model = catalog.find("qwen3-8b-int4-npu")
    assert npu_model is not None
    assert assess(npu_model, LAPTOP).devices[0] == "NPU"
    assert assess(npu_model, SMALL).devices == ("CPU",)
    three_b = catalog.find("qwen2.5-3b-instruct-int4")
    assert (
        three_b is not None
        and assess(three_b, MachineInfo(5 * GB, frozenset({"CPU"}))).status == "tight"
    )
    only_npu = MachineInfo(total_memory=16 * GB, device_kinds=frozenset({"NPU"}))
    assert assess(seven_b, only_npu).status == "no-device"


def test_recommendation_for_first_run() -> None:
    catalog = Catalog.load()
    laptop = catalog.recommend(LAPTOP)
    assert laptop is not None and laptop.id == "qwen3-4b-int4"
    tiny = catalog.recommend(TINY)
    assert tiny is not None and tiny.id == "qwen2.5-0.5b-instruct-int4"
    assert catalog.recommend(MachineInfo(512 * 1024**2, frozenset({"CPU"}))) is None


def test_this_machine_and_the_cli_listing(sidelight_home: Path) -> None:
    here = MachineInfo.detect()
    assert "CPU" in here.device_kinds and here.total_memory > GB
    result = sidelight(sidelight_home, "list", "--catalog", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["approximate"] is True
    assert {m["status"] for m in data["models"]} <= {"fits", "tight", "too-big", "no-device"}
    assert data["recommended"] in {m["id"] for m in data["models"]}
    text = sidelight(sidelight_home, "list", "--catalog")
    assert "recommended to start with: sidelight pull" in text.stdout


WORKSTATION = MachineInfo(total_memory=32 * GB, device_kinds=frozenset({"CPU", "GPU"}))


def test_every_entry_has_what_the_model_manager_and_the_cli_show() -> None:
    catalog = Catalog.load()
    for e in catalog.entries:
        assert e.name and e.weights and e.summary and e.licence and e.note, e.id
        assert e.download_gb > 0 and e.memory_gb > 0 and e.devices, e.id
        if e.task in ("transcription", "speech"):  # audio in or out: no chat, no window
            assert e.context_length is None and "tools" not in e.capabilities, e.id
        else:
            assert e.context_length and e.context_length >= 512, e.id
            assert {"chat_template", "tools", "reasoning"} <= set(e.capabilities), e.id
        assert e.source in {"download", "convert"}, e.id
        assert e.verified or e.verified_note, e.id
        assert e.draft is None or catalog.find(e.draft) is not None, e.id
    # Nothing could be downloaded where this catalog was written, and it says so.
    assert not any(e.verified for e in catalog.entries)
    # The late-2026 families the issue asks for are there.
    ids = " ".join(e.id for e in catalog.entries)
    for family in (
        "qwen3-",
        "qwen3.5-",
        "qwen3-coder-30b-a3b",
        "gpt-oss-20b",
        "gemma-3-",
        "gemma-4-",
        "phi-4-mini",
        "ministral-3-",
        "granite-4",
        "deepseek-r1-distill",
    ):
        assert family in ids, family


def test_big_models_fit_only_where_memory_allows() -> None:
    catalog = Catalog.load()
    coder = catalog.find("qwen3-coder-30b-a3b-instruct-int4")
    gpt_oss = catalog.find("gpt-oss-20b-int4")
    assert coder is not None and gpt_oss is not None
    assert assess(coder, LAPTOP).status == "too-big"
    assert assess(coder, WORKSTATION).status == "fits"
    assert assess(gpt_oss, LAPTOP).status == "tight"
    assert assess(gpt_oss, SMALL).status == "too-big"
    npu_distill = catalog.find("deepseek-r1-distill-qwen-1.5b-int4-npu")
    assert npu_distill is not None and assess(npu_distill, LAPTOP).devices[0] == "NPU"


def test_a_convert_entry_names_its_upstream_repo_and_the_command() -> None:
    entry = Catalog.load().find("granite-4.1-3b-int4")
    assert (
        entry is not None and entry.needs_conversion and entry.repo == "ibm-granite/granite-4.1-3b"
    )
    assert entry.convert_command() == (
        "sidelight convert ibm-granite/granite-4.1-3b --weights int4 --id granite-4.1-3b-int4"
    )
    assert "estimated" in entry.note


def _entry(**changes: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": "m",
        "repo": "org/m",
        "source": "download",
        "weights": "int4",
        "download_gb": 1.0,
        "memory_gb": 2.0,
        "devices": ["CPU"],
        "verified": False,
        "verified_note": "no network here",
    }
    entry.update(changes)
    return {key: value for key, value in entry.items() if value is not None}


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"source": "gguf"}, "'source' must be 'download' or 'convert', not 'gguf'"),
        ({"verified": None}, "'verified' must be true or false, not None"),
        ({"verified": "no"}, "'verified' must be true or false, not 'no'"),
        ({"verified_note": ""}, "'verified_note' must say why"),
        ({"source": "convert", "weights": "q4_k_m"}, "'weights' must be one of int4, int8, fp16"),
        ({"devices": ["TPU"]}, "'devices' must be some of CPU, GPU, NPU"),
        ({"memory_gb": -1}, "'memory_gb' must be a positive number of GB, not -1"),
        ({"repo": "just-a-name"}, "'repo' must be a hub repo id (org/name)"),
        ({"kind": "video"}, "'kind' must be one of"),
        ({"note": 3}, "'note' must be a string"),
    ],
)
def test_a_malformed_entry_is_refused_naming_the_field(
    tmp_path: Path, changes: dict[str, Any], words: str
) -> None:
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps({"models": [_entry(**changes)]}), encoding="utf-8")
    with pytest.raises(StoreError, match="catalog entry 'm'") as refused:
        Catalog.load(path)
    assert words in str(refused.value)


def test_a_convert_entry_is_never_the_first_run_pick(tmp_path: Path) -> None:
    path = tmp_path / "catalog.json"
    small = _entry(id="small", source="convert", memory_gb=1.0)
    big = _entry(id="big", memory_gb=3.0)
    path.write_text(json.dumps({"models": [small, big]}), encoding="utf-8")
    pick = Catalog.load(path).recommend(SMALL)
    assert pick is not None and pick.id == "big"


def test_a_well_formed_entry_loads(tmp_path: Path) -> None:
    path = tmp_path / "catalog.json"
    verified = _entry(verified=True, verified_note="", source="convert")
    path.write_text(json.dumps({"models": [verified]}), encoding="utf-8")
    (entry,) = Catalog.load(path).entries
    assert entry.verified and entry.needs_conversion and entry.verified_note == ""


def test_the_cli_lists_sources_and_points_a_convert_entry_at_convert(sidelight_home: Path) -> None:
    listing = json.loads(sidelight(sidelight_home, "list", "--catalog", "--json").stdout)
    rows = {m["id"]: m for m in listing["models"]}
    assert rows["gemma-3-1b-it-int4"]["source"] == "convert"
    assert rows["qwen3-4b-int4"]["verified"] is False and rows["qwen3-4b-int4"]["verified_note"]
    text = sidelight(sidelight_home, "list", "--catalog").stdout
    assert "SOURCE" in text and "were never downloaded and served" in text
    pulled = sidelight(sidelight_home, "pull", "gemma-3-1b-it-int4")
    assert pulled.returncode == 2
    assert "sidelight convert google/gemma-3-1b-it --weights int4 --id gemma-3-1b-it-int4" in (
        pulled.stderr
    )
