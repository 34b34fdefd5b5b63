"""Fixtures shared by the end-to-end server tests.

``server`` is one real ``sidelight serve`` shared by every module of this package that only
reads from it: the demo model with the harness's test settings (tests/server/harness.py),
on a home with an empty store. A module that needs a server of its own (models in its store,
other settings or arguments, or tests that change what other modules would see: unloading,
killing or stopping workers, keep_alive that unloads, counting requests from a start)
defines its own module-scoped ``server``, which overrides this one for that module. The
fixtures here build on whichever ``server`` the requesting module has.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.server.harness import ServerProcess, running_server
from tests.waiting import wait_until

DEMO = "sidelight-demo"  # the shared server's model: tests/conftest.py's tiny_model


@pytest.fixture(scope="package")
def default_server(
    tmp_path_factory: pytest.TempPathFactory, tiny_model: Path
) -> Iterator[ServerProcess]:
    """The shared server itself, started once for the package; use ``server``."""
    with running_server(tmp_path_factory.mktemp("default-home"), tiny_model) as proc:
        # A model loaded from a path (not the store) is known by name only once an API call
        # has seen it loaded: list it now, so that it can be loaded again after an idle
        # unload however early that comes.
        assert [m["id"] for m in _models(proc)] == [DEMO]
        yield proc


@pytest.fixture(scope="module")
def server(default_server: ServerProcess) -> ServerProcess:
    """The shared server, its default model loaded as on a fresh start.

    Modules may run minutes apart, longer than the idle unload (300 s by default): then the
    model is loaded again here (Ollama's load-only request) before the module's tests run.
    """
    _load_default_model(default_server)
    return default_server


def _load_default_model(server: ServerProcess) -> None:
    if _serves_the_demo(server):
        return
    httpx.post(f"{server.base_url}/api/generate", json={"model": DEMO}, timeout=180)
    wait_until(
        lambda: _serves_the_demo(server),
        lambda: f"the demo model loaded again: {server.health().json()}",
        180,
        interval=0.2,
    )


def _models(server: ServerProcess) -> list[dict[str, object]]:
    data: list[dict[str, object]] = httpx.get(f"{server.base_url}/v1/models").json()["data"]
    return data


def _serves_the_demo(server: ServerProcess) -> bool:
    health = server.health().json()
    return bool(health["status"] == "ready" and health["model"] == DEMO)


@pytest.fixture
def client(server: ServerProcess) -> Iterator[openai.OpenAI]:
    # Closed here, not left to garbage collection: an open pooled socket collected later is an
    # "unclosed socket" warning (an error under -W error) in whatever test runs then.
    with openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def model_id(server: ServerProcess) -> str:
    return str(server.wait_ready()["model"])


@pytest.fixture(scope="session")
def family_server(
    tmp_path_factory: pytest.TempPathFactory, tiny_model: Path
) -> Iterator[ServerProcess]:
    """One server with the tool-calling family models in its store, shared by the
    family modules (their parsers and their call grammars), so the models load once."""
    from tests.server.test_families_e2e import store_families

    home = tmp_path_factory.mktemp("families-home")
    store_families(home)
    with running_server(home, tiny_model) as proc:
        yield proc
