"""A model's own settings (engine.model_prefs): validation of the file and the API's changes,
and how they fill a request (engine.server.pipeline.model_defaults). Pure: no model."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from engine.model_prefs import (
    MAX_FILE_BYTES,
    PREF_KEYS,
    PREFS_FILE,
    ModelPrefs,
    PrefsError,
    read_prefs,
    write_prefs,
)
from engine.models import ModelSpec
from engine.server.pipeline.model_defaults import with_model_defaults
from engine.server.pipeline.request import GenerateRequest
from engine.worker.messages import SamplingParams


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"top_p": float("nan")}, "top_p"),
        ({"top_k": 1.5}, "top_k"),
        ({"seed": -3}, "seed"),
        ({"context_length": 100}, "context_length"),
        ({"context_length": 4096}, "context_length"),  # over the model's own 2048
        ({"device": "TPU"}, "device"),
        ({"device": 3}, "device"),
        ({"kv_cache_precision": "i4"}, "kv_cache_precision"),
        ({"kv_cache_precision": 8}, "kv_cache_precision"),
        ({"keep_alive_seconds": -5}, "keep_alive_seconds"),
        ({"system_prompt": "x"}, "system_prompt"),  # unknown
    ],
)
def test_each_bad_setting_is_refused_naming_its_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(PrefsError) as refused:
        ModelPrefs.from_dict(data, model_limit=2048)
    assert refused.value.field == field and field in str(refused.value)


def test_good_settings_are_normalised_and_round_trip(tmp_path: Path) -> None:
    prefs = ModelPrefs.from_dict(
        {
            "device": "gpu.1",
            "keep_alive_seconds": -1,
            "context_length": 1024,
            "top_k": 0,
            "kv_cache_precision": "F16",
        },
        model_limit=2048,
    )
    assert (prefs.device, prefs.keep_alive_seconds) == ("GPU.1", -1.0)
    assert prefs.kv_cache_precision == "f16"
    assert prefs.load_settings() == (1024, "GPU.1", "f16")
    write_prefs(tmp_path, prefs)
    assert read_prefs(tmp_path, model_limit=2048) == prefs
    cleared = prefs.updated(
        {"device": None, "context_length": None, "top_k": None, "kv_cache_precision": None}
    )
    assert cleared.to_dict() == {"keep_alive_seconds": -1.0}
    write_prefs(tmp_path, ModelPrefs())  # the defaults: no file at all
    assert not (tmp_path / PREFS_FILE).exists() and read_prefs(tmp_path) == ModelPrefs()
    assert set(PREF_KEYS) >= {"temperature", "context_length", "keep_alive_seconds", "device"}


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b"\xff\xfe", "not valid JSON"),
        (b" " * (MAX_FILE_BYTES + 1), "larger than"),
        (json.dumps({"temperature": 9}).encode(), "temperature"),
    ],
)
def test_a_damaged_file_is_refused_whole(tmp_path: Path, raw: bytes, words: str) -> None:
    (tmp_path / PREFS_FILE).write_bytes(raw)
    with pytest.raises(PrefsError, match=words):
        read_prefs(tmp_path)


def test_only_what_the_request_left_out_takes_the_models_value() -> None:
    prefs = ModelPrefs(temperature=0.2, top_k=0, seed=7, keep_alive_seconds=-1)
    request = GenerateRequest(
        model="m", dialect="openai", messages=[], sampling=SamplingParams(temperature=0.9)
    )
    filled = with_model_defaults(request, prefs)
    assert filled.sampling.temperature == 0.9  # the client's own value wins
    assert (filled.sampling.seed, filled.sampling.top_k) == (7, None)  # top_k 0: off
    assert filled.keep_alive == math.inf  # -1: forever
    explicit = GenerateRequest(model="m", dialect="ollama", messages=[], keep_alive=30.0)
    assert with_model_defaults(explicit, prefs).keep_alive == 30.0
    assert with_model_defaults(request, ModelPrefs()) is request


def test_a_context_setting_caps_the_served_context() -> None:
    spec = ModelSpec(id="m", path=Path("/x"), format="ir", context_length=32768)
    capped = spec.with_prefs(ModelPrefs(context_length=8192))
    assert (capped.context_length, capped.prefs.context_length) == (8192, 8192)
    assert spec.with_prefs(ModelPrefs()).context_length == 32768
