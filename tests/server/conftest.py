"""Fixtures shared by the end-to-end server tests.

Each test module defines its own module-scoped ``server`` (a real ``sidelight serve``); the
fixtures here build on whichever ``server`` the requesting module provides.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.server.harness import ServerProcess


@pytest.fixture
def client(server: ServerProcess) -> Iterator[openai.OpenAI]:
    # Closed here, not left to garbage collection: an open pooled socket collected later is an
    # "unclosed socket" warning (an error under -W error) in whatever test runs then.
    with openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def model_id(server: ServerProcess) -> str:
    return str(server.wait_ready()["model"])
