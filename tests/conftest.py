"""Shared fixtures: an isolated Sidelight home, the tiny trained model and its dialogues.

The tiny model (``resources/models/sidelight-demo``) is built by
``tests/models/build_tiny_model.py`` and shipped in the repo; it answers the prompts in
``tests/models/dialogues.json`` exactly under greedy decoding, through real OpenVINO.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import engine  # noqa: F401 - first: keeps OpenVINO's telemetry off here too (engine.telemetry)

if TYPE_CHECKING:
    from tests.store.hub_server import HubServer

ROOT = Path(__file__).resolve().parent.parent
TINY_MODEL = ROOT / "resources" / "models" / "sidelight-demo"
TINY_GGUF = ROOT / "tests" / "fixtures" / "sidelight-demo-f16.gguf"
# The fill-in-the-middle fixture: a tiny code model with Qwen2.5-Coder's FIM tokens (the demo
# model has none), trained on the code holes in tests/models/coder_dialogues.json.
TINY_CODER = ROOT / "tests" / "fixtures" / "tiny-coder"
TINY_CODER_GGUF = ROOT / "tests" / "fixtures" / "tiny-coder-f16.gguf"
DIALOGUES = ROOT / "tests" / "models" / "dialogues.json"


@pytest.fixture(autouse=True)
def sidelight_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own config/cache/log folders; nothing touches the real ones."""
    home = tmp_path / "sidelight-home"
    monkeypatch.setenv("SIDELIGHT_HOME", str(home))
    for name in list(os.environ):
        if name.startswith("SIDELIGHT_") and name != "SIDELIGHT_HOME":
            monkeypatch.delenv(name)
    yield home


@pytest.fixture(autouse=True)
def close_hub_client() -> Iterator[None]:
    """Close huggingface_hub's process-wide HTTP client after each test.

    Its pool (httpcore2) drops connections the fake hub has closed without closing their
    sockets; left to a later garbage collection they surface as "unclosed socket" warnings
    (errors under ``-W error``) in whatever test runs then. Closing the client and
    collecting here, with that one library warning ignored, keeps it deterministic. Our own
    code streams every download inside ``with`` blocks.
    """
    yield
    if "huggingface_hub" in sys.modules:
        from huggingface_hub import close_session

        close_session()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()


@pytest.fixture
def search_hub_server(tmp_path: Path) -> Iterator[HubServer]:
    """The local hub stand-in (the real hub is unreachable here) holding the search repos of
    :mod:`tests.store.search_fixtures`: for the engine's and the model manager's search."""
    from tests.store.hub_server import HubConfig, HubServer
    from tests.store.search_fixtures import add_search_repos

    root = tmp_path / "hub"
    add_search_repos(root)
    with HubServer(HubConfig(root=root)) as server:
        yield server


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    return TINY_MODEL


@pytest.fixture(scope="session")
def tiny_gguf() -> Path:
    return TINY_GGUF


@pytest.fixture(scope="session")
def dialogues() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DIALOGUES.read_text(encoding="utf-8"))
    return data


def dialogue(dialogues: dict[str, Any], name: str) -> dict[str, Any]:
    for item in dialogues["dialogues"]:
        if item["name"] == name:
            return dict(item)
    raise KeyError(name)
