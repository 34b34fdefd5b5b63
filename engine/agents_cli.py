"""``sidelight agents``: print what Claude Code and Codex must be told about the model in use.

It asks the running server (``sidelight serve`` or the tray app, at the configured host and
port) for its models and their served context (``GET /v1/models``: the window the KV-cache
budget allows, which may be less than the model's own), and prints the settings of
:mod:`engine.agent_setup` for the loaded chat model or ``--model ID``.

Threading: a command-line entry point (one thread).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from typing import Any

from engine.agent_setup import AGENTS, Agent, setup_text
from engine.settings import Settings

TIMEOUT_SECONDS = 10.0


def add_agents_command(sub: Any) -> None:
    """Register ``agents`` on the CLI's subparsers."""
    agents = sub.add_parser(
        "agents",
        help="print the settings Claude Code and Codex need for the model in use "
        "(its context window and output limit)",
    )
    agents.add_argument("agent", nargs="?", choices=AGENTS, help="one agent (default: both)")
    agents.add_argument("--model", help="a model id from GET /v1/models (default: the loaded one)")


def run_agents_command(settings: Settings, args: argparse.Namespace) -> int:
    base_url = _local_url(settings)
    try:
        models = _chat_models(base_url, settings.api_key)
    except (OSError, ValueError) as exc:
        print(
            f"sidelight agents: no Sidelight server answers at {base_url} ({exc}); start "
            "`sidelight serve` or the tray app first",
            file=sys.stderr,
        )
        return 1
    model = _pick(models, args.model)
    if model is None:
        wanted = f"'{args.model}'" if args.model else "a chat model"
        print(f"sidelight agents: the server at {base_url} has no {wanted}", file=sys.stderr)
        return 1
    context = model.get("context_length")
    if not isinstance(context, int) or context <= 0:
        print(f"sidelight agents: {model['id']} states no context window", file=sys.stderr)
        return 1
    agents: tuple[Agent, ...] = (args.agent,) if args.agent else AGENTS
    keyed = settings.api_key is not None
    print("\n\n".join(setup_text(a, base_url, model["id"], context, keyed=keyed) for a in agents))
    return 0


def _local_url(settings: Settings) -> str:
    host = settings.host
    if host in ("0.0.0.0", "::", ""):  # bound everywhere: this machine reaches it on loopback
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.port}"


def _chat_models(base_url: str, api_key: str | None) -> list[dict[str, Any]]:
    request = urllib.request.Request(f"{base_url}/v1/models")  # noqa: S310 (always http://)
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as reply:  # noqa: S310
            data = json.loads(reply.read(4 * 1024 * 1024))
    except urllib.error.HTTPError as exc:
        raise ValueError(f"HTTP {exc.code}") from exc
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ValueError("GET /v1/models did not answer a model list")
    return [
        e for e in entries if isinstance(e, dict) and e.get("task", "chat") in ("chat", "vision")
    ]


def _pick(models: list[dict[str, Any]], wanted: str | None) -> dict[str, Any] | None:
    if wanted is not None:
        return next((m for m in models if str(m.get("id", "")).lower() == wanted.lower()), None)
    loaded = [m for m in models if m.get("status") == "loaded"]
    candidates = loaded or models
    return candidates[0] if candidates else None
