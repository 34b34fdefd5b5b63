"""What a coding agent must be told about a served model: where it is, its window, its output.

Why: an agent that does not know the window compacts too late and every turn past it is a
refused request. Claude Code assumes 1M tokens for a model id it does not know (it prints
"doesn't recognize the model ... so it assumes a context window of 1m tokens") and reads
the real one only from ``CLAUDE_CODE_MAX_CONTEXT_TOKENS``; its model catalog and
``CLAUDE_CODE_AUTO_COMPACT_WINDOW`` both clamp to at least 100k tokens, too large for a
laptop model (checked on Claude Code 2.1.332: with the variable set, a prompt over the window
is "Prompt is too long" before anything is sent). Codex reads ``model_context_window`` and
``model_auto_compact_token_limit`` from its ``config.toml`` (or ``-c key=value``) and
otherwise assumes a 272k window for a model it does not know.

``sidelight agents`` prints these for the model in use (:func:`setup_text`); the README says
the same. Pure functions: no I/O.
"""

from __future__ import annotations

from typing import Literal, get_args

Agent = Literal["claude", "codex"]
AGENTS: tuple[Agent, ...] = get_args(Agent)

# Codex compacts at this share of the window (what Claude Code does by default), leaving the
# rest for its summary and the reply.
COMPACT_SHARE = 0.85
# What an agent may ask for one reply: a quarter of the window, at most 8k (a reply that
# needs more is rare, and every token reserved for it is one the conversation cannot use).
MAX_OUTPUT_TOKENS = 8192


def output_tokens(context_length: int) -> int:
    """The output limit to give an agent for a model with this window."""
    return max(256, min(MAX_OUTPUT_TOKENS, context_length // 4))


def claude_code_env(
    base_url: str, model: str, context_length: int, token: str
) -> list[tuple[str, str]]:
    """Claude Code's environment for ``model`` at ``base_url`` (the server, no ``/v1``);
    ``token`` is any text, or the server's API key when it has one."""
    return [
        ("ANTHROPIC_BASE_URL", base_url),
        ("ANTHROPIC_AUTH_TOKEN", token),
        ("ANTHROPIC_MODEL", model),
        ("ANTHROPIC_DEFAULT_HAIKU_MODEL", model),  # its background tasks: the same model
        ("CLAUDE_CODE_MAX_CONTEXT_TOKENS", str(context_length)),
        ("CLAUDE_CODE_MAX_OUTPUT_TOKENS", str(output_tokens(context_length))),
    ]


def codex_config(base_url: str, model: str, context_length: int, keyed: bool = False) -> str:
    """Codex's ``config.toml`` lines for ``model`` at ``base_url`` (the server, no ``/v1``)."""
    lines = [
        f"model = {_toml(model)}",
        'model_provider = "sidelight"',
        f"model_context_window = {context_length}",
        f"model_auto_compact_token_limit = {int(context_length * COMPACT_SHARE)}",
        "",
        "[model_providers.sidelight]",
        'name = "Sidelight"',
        f"base_url = {_toml(base_url.rstrip('/') + '/v1')}",
        'wire_api = "responses"',
    ]
    if keyed:
        lines.append('env_key = "SIDELIGHT_API_KEY"  # Codex sends it as Bearer')
    return "\n".join(lines)


def setup_text(
    agent: Agent, base_url: str, model: str, context_length: int, *, keyed: bool = False
) -> str:
    """What to paste for ``agent``: shell exports for Claude Code, TOML for Codex."""
    if agent == "claude":
        token = "$SIDELIGHT_API_KEY" if keyed else "sidelight"
        env = claude_code_env(base_url, model, context_length, token)
        exports = "\n".join(f"export {name}={_shell(value)}" for name, value in env)
        return (
            f"# Claude Code on {model} ({context_length:,}-token context), in your shell or "
            "the env object of ~/.claude/settings.json:\n" + exports
        )
    return (
        f"# Codex on {model} ({context_length:,}-token context), in ~/.codex/config.toml:\n"
        + codex_config(base_url, model, context_length, keyed)
    )


def _toml(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def _shell(text: str) -> str:
    if text.startswith("$") or all(c.isalnum() or c in "-_./:@" for c in text):
        return text
    return "'" + text.replace("'", "'\\''") + "'"
