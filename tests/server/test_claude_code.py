"""Claude Code itself (``claude -p``) against ``sidelight serve`` on the demo model.

The CLI is installed by the test set-up (``packaging/dev.py`` runs ``npm ci`` in
``tests/agents/claude``) and run headless exactly as the README tells people to:
``ANTHROPIC_BASE_URL``, ``ANTHROPIC_AUTH_TOKEN`` and ``ANTHROPIC_MODEL``, in an empty
folder with a scratch ``HOME``. Two runs:

* Claude Code's full agent prompt (about 26,000 tokens) is far over the demo model's
  2048-token context: Sidelight refuses it with a 400, which Claude Code must show as
  "Prompt is too long", never answer from a silently cut prompt.
* ``--bare --tools "" --system-prompt ...`` makes a request small enough for the demo
  model, which answers with its canned fallback reply, printed as is.

The requests these runs send are kept in ``tests/fixtures/plugin_requests/claude_code.json``
and replayed in ``test_plugin_replays.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main as cli_main
from tests.conftest import ROOT
from tests.server.harness import ServerProcess

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("node") is None, reason="Claude Code needs Node.js to install"),
]
# ``server`` is the package's shared one (tests/server/conftest.py): these tests only read.

CLAUDE_BIN = ROOT / "tests" / "agents" / "claude" / "node_modules" / ".bin"
MODEL = "sidelight-demo"


@pytest.fixture(scope="module")
def claude_cli() -> str:
    found = shutil.which("claude", path=str(CLAUDE_BIN))
    assert found, "Claude Code is not installed: run python3 packaging/dev.py test (npm ci)"
    return found


def run_claude(
    cli: str,
    server: ServerProcess,
    tmp_path: Path,
    *args: str,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "USERPROFILE": str(home),
        "ANTHROPIC_BASE_URL": server.base_url,
        "ANTHROPIC_AUTH_TOKEN": "sidelight",
        "ANTHROPIC_MODEL": MODEL,
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        **(extra_env or {}),
    }
    return subprocess.run(
        [cli, "-p", "Hello", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=180,
        check=False,
    )


def test_claude_code_prints_the_models_reply(
    claude_cli: str, server: ServerProcess, tmp_path: Path, dialogues: dict[str, Any]
) -> None:
    done = run_claude(
        claude_cli,
        server,
        tmp_path,
        "--bare",
        "--tools",
        "",
        "--system-prompt",
        "You are a helpful assistant.",
    )
    assert done.returncode == 0, done.stderr
    # Claude Code adds its own system line, so this is not a trained dialogue: the demo
    # model gives its fallback reply (greedy decoding, the model's default).
    assert done.stdout == dialogues["fallback_reply"] + "\n"


def test_claude_code_shows_that_its_prompt_is_over_the_context(
    claude_cli: str, server: ServerProcess, tmp_path: Path
) -> None:
    done = run_claude(claude_cli, server, tmp_path)
    assert done.returncode == 1
    assert done.stdout.startswith("Prompt is too long"), done.stdout + done.stderr
    assert "maximum context length is 2048 tokens, but the prompt has" in done.stdout
    assert "Please reduce the length of the messages." in done.stdout


def test_told_by_sidelight_agents_claude_code_knows_the_window(
    claude_cli: str,
    server: ServerProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 27: without it Claude Code prints "doesn't recognize the model ... assumes a
    context window of 1m tokens" and sends every prompt. With what ``sidelight agents``
    prints for the served model, it knows the 2,048-token window: no notice, and a prompt
    over it is refused by Claude Code itself, before anything is sent."""
    monkeypatch.setenv("SIDELIGHT_HOME", str(tmp_path / "sidelight-home"))
    monkeypatch.setenv("SIDELIGHT_PORT", str(server.port))
    assert cli_main(["agents", "claude"]) == 0
    exports = [line for line in capsys.readouterr().out.splitlines() if line.startswith("export")]
    told = dict(line.removeprefix("export ").split("=", 1) for line in exports)
    assert told["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "2048"
    assert told["ANTHROPIC_MODEL"] == MODEL
    for name in ("plain", "told"):
        (tmp_path / name).mkdir()
    plain = run_claude(claude_cli, server, tmp_path / "plain", "--bare", "--tools", "")
    assert "doesn't recognize the model" in plain.stdout + plain.stderr  # the peer's default
    told_run = run_claude(
        claude_cli, server, tmp_path / "told", "--bare", "--tools", "", extra_env=told
    )
    output = told_run.stdout + told_run.stderr
    assert "doesn't recognize the model" not in output, output
    assert told_run.stdout.startswith("Prompt is too long"), output
    assert "maximum context length" not in output  # Claude Code's own refusal, not ours
