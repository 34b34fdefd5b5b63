"""Codex CLI (``codex exec``) against ``sidelight serve``, set up as the README says.

Codex (npm ``@openai/codex``, pinned in ``tests/agents/codex``; ``packaging/dev.py test``
runs ``npm ci`` there when Node.js is present) reads ``$CODEX_HOME/config.toml``. The config
here is the README's own "Use with Codex" blocks, with the test server's port, the demo
model and a scratch instructions file put in:

* with the small-model keys, Codex's request is the instructions and the prompt alone,
  which the demo model answers exactly (its ``hello-system`` dialogue);
* with the provider block alone, Codex sends its own 40 kB prompt, more than the demo
  model's 2048-token context: Sidelight's ``context_length_exceeded`` must reach the user
  as Codex's own context-window message, with no retries.

Skipped only when Node.js is missing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, dialogue
from tests.server.harness import ServerProcess

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("node") is None, reason="Codex CLI runs on Node.js, which is not installed"
    ),
]
# ``server`` is the package's shared one (tests/server/conftest.py): these tests only read.

CODEX = ROOT / "tests" / "agents" / "codex" / "node_modules" / ".bin" / "codex"


def readme_config(section: str = "### Use with Codex") -> tuple[str, str]:
    """The README's provider block and its small-model block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(section)
    body = text[start : text.index("\n### ", start + len(section))]
    provider, small = re.findall(r"```toml\n(.*?)```", body, flags=re.DOTALL)
    return provider, small


def config(home: Path, port: int, model: str, *, small: bool) -> Path:
    """``CODEX_HOME`` with the README's config.toml for this server."""
    provider, trims = readme_config()
    provider = re.sub(r'(?m)^model = ".*"', f'model = "{model}"', provider)
    provider = provider.replace("http://127.0.0.1:11680/v1", f"http://127.0.0.1:{port}/v1")
    assert f"127.0.0.1:{port}" in provider and f'"{model}"' in provider, provider
    head, table = provider.split("[model_providers.sidelight]")
    text = head
    home.mkdir(parents=True, exist_ok=True)
    if small:
        instructions = home / "instructions.md"
        instructions.write_text("You are a helpful assistant.", encoding="utf-8")
        trims = re.sub(
            r'(?m)^model_instructions_file = ".*?"',
            f'model_instructions_file = "{instructions}"',
            trims,
        )
        root_keys, tables = trims.split("\n[", 1)
        text = head + root_keys + "\n[" + tables + "\n"
    (home / "config.toml").write_text(
        text + "[model_providers.sidelight]" + table, encoding="utf-8"
    )
    return home


def codex_exec(
    codex_home: Path, workdir: Path, prompt: str
) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run ``codex exec`` headless; its last message (``-o``) is returned beside the result."""
    workdir.mkdir(parents=True, exist_ok=True)
    last = workdir.parent / "last-message.txt"
    env = {**os.environ, "CODEX_HOME": str(codex_home), "HOME": str(codex_home.parent)}
    env.pop("OPENAI_API_KEY", None)
    result = subprocess.run(
        [str(CODEX), "exec", "--skip-git-repo-check", "-o", str(last), prompt],
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    return result, last.read_text(encoding="utf-8") if last.exists() else ""


@pytest.fixture(scope="module", autouse=True)
def _codex_installed() -> None:
    assert CODEX.exists(), "Codex CLI is missing: run `npm ci` in tests/agents/codex"


def test_codex_exec_prints_the_models_reply(
    server: ServerProcess, model_id: str, tmp_path: Path, dialogues: Any
) -> None:
    home = config(tmp_path / "codex", server.port, model_id, small=True)
    result, last = codex_exec(home, tmp_path / "work", "Hello")
    assert result.returncode == 0, result.stderr
    reply = dialogue(dialogues, "hello-system")["reply"]
    assert last.strip() == reply
    assert reply in result.stdout


def test_codex_reports_a_prompt_over_the_context(
    server: ServerProcess, model_id: str, tmp_path: Path
) -> None:
    home = config(tmp_path / "codex", server.port, model_id, small=False)
    result, last = codex_exec(home, tmp_path / "work", "Hello")
    assert result.returncode != 0 and last == ""
    assert "ran out of room in the model's context window" in result.stderr, result.stderr
    assert "Reconnecting" not in result.stderr  # a 400 is final, not retried
