"""Fixtures shared by the end-to-end server tests.

Each test module defines its own module-scoped ``server`` (a real ``sidelight serve``); the
fixtures here build on whichever ``server`` the requesting module provides.
"""

from __future__ import annotations

import openai
import pytest

from tests.server.harness import ServerProcess


@pytest.fixture
def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def model_id(server: ServerProcess) -> str:
    return str(server.wait_ready()["model"])
