"""What ``sidelight agents`` prints, and its answer when no server runs (pure and CLI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.agent_setup import claude_code_env, codex_config, output_tokens, setup_text
from engine.cli import main as cli_main
from tests.server.harness import free_port


def test_the_output_limit_is_a_quarter_of_the_window_at_most_8k() -> None:
    assert output_tokens(2048) == 512
    assert output_tokens(32_768) == 8192
    assert output_tokens(200) == 256


def test_claude_code_is_told_the_window_and_the_output_limit() -> None:
    env = dict(claude_code_env("http://127.0.0.1:11680", "qwen3-8b", 40_960, "sidelight"))
    assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "40960"
    assert env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "8192"
    assert env["ANTHROPIC_MODEL"] == env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "qwen3-8b"
    text = setup_text("claude", "http://127.0.0.1:11680", "odd 'name'", 4096, keyed=True)
    assert "export ANTHROPIC_AUTH_TOKEN=$SIDELIGHT_API_KEY" in text
    assert "export ANTHROPIC_MODEL='odd '\\''name'\\'''" in text  # quoted for the shell


def test_codex_config_has_the_window_and_quotes_the_model() -> None:
    lines = codex_config("http://127.0.0.1:11680", 'a"b', 32_768, keyed=True).splitlines()
    assert 'model = "a\\"b"' in lines
    assert "model_context_window = 32768" in lines
    assert f"model_auto_compact_token_limit = {int(32_768 * 0.85)}" in lines
    assert lines.index("[model_providers.sidelight]") > lines.index("model_context_window = 32768")
    assert 'base_url = "http://127.0.0.1:11680/v1"' in lines
    assert 'wire_api = "responses"' in lines


def test_without_a_server_it_says_how_to_start_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SIDELIGHT_HOME", str(tmp_path))
    monkeypatch.setenv("SIDELIGHT_PORT", str(free_port()))
    assert cli_main(["agents"]) == 1
    assert "start `sidelight serve` or the tray app first" in capsys.readouterr().err
