"""The curated catalog: well-formed, and steering each machine to what fits it."""

from __future__ import annotations

import json
from pathlib import Path

from engine.store.catalog import GB, Catalog, MachineInfo, assess
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
    assert all(e.repo.startswith("OpenVINO/") for e in catalog.entries)
    kinds = {e.kind for e in catalog.entries}
    assert {"chat", "coder", "embeddings", "rerank"} <= kinds
    assert {e.task for e in catalog.entries} == {"chat", "embeddings", "rerank"}
    npu = [e for e in catalog.entries if e.repo.endswith("-cw-ov")]
    assert npu and all(e.devices[0] == "NPU" for e in npu)
    assert all(0 < e.download_gb < e.memory_gb for e in catalog.entries)
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
    assert laptop is not None and laptop.id == "qwen2.5-1.5b-instruct-int4"
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
