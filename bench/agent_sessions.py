"""Multi-turn agent sessions built from captured Claude Code and Codex requests (issue 27).

Why: the replay benchmark (``bench/agent_replay.py``) needs sessions of 3+ turns with tool
results in between, in the exact shape the agents send them. The captures in
``tests/fixtures/plugin_requests`` hold each agent's real first request (Claude Code's
~47 kB prompt with its 12 tools, Codex's ~40 kB one with its 9 tools) and the real way
each agent grows the conversation, but no capture is five turns long with tools:

- Claude Code: ``claude_code_tool_search.json`` is two real turns of one session (a
  ToolSearch call, then its ``tool_reference`` result, which adds the WebFetch tool to
  ``tools``). Later turns are built as Claude Code builds them (``claude_code_turns.json``
  shows it): the whole previous request again, then the assistant's tool call, then the
  user turn with its ``tool_result``, whose block alone carries ``cache_control`` (Claude
  Code moves the marker to the newest turn).
- Codex: ``codex.json``'s ``default`` request is the first turn; later turns append a
  ``function_call`` item and its ``function_call_output``, as ``codex exec`` does
  (``codex_turns.json`` shows the conversation resent whole each turn).

The assistant's calls and the tool outputs are scripted (``STEPS``), not the model's own
reply: a random-weight model's reply is noise, and both servers must see the same prompt
on every turn. The outputs are real text: listings and numbered lines of this repository's
own files, so their size is that of real tool results.

Pure functions of their inputs (they read files only in ``load_bodies`` and
``tool_output``); safe on any thread.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "tests" / "fixtures" / "plugin_requests"

Agent = Literal["claude", "codex"]


@dataclass(frozen=True)
class Step:
    """One scripted tool round: what the assistant calls and what the tool answered."""

    name: str  # Claude Code's tool name
    codex_cmd: str  # the same action as a Codex ``exec_command``
    arguments: dict[str, Any]
    output: Callable[[Path], str]  # the tool's output, from the repository root


def _find(root: Path) -> str:
    paths = sorted(str(p.relative_to(root)) for p in (root / "engine").rglob("*.py"))
    return "\n".join(paths[:80])


def _read(root: Path) -> str:
    lines = (root / "engine" / "server" / "anthropic" / "translate.py").read_text().splitlines()
    return "\n".join(f"{i:>6}\t{line}" for i, line in enumerate(lines[:200], start=1))


def _grep(root: Path) -> str:
    lines = (root / "engine" / "server" / "anthropic" / "protocol.py").read_text().splitlines()
    hits = [f"{i}:{line}" for i, line in enumerate(lines, start=1) if "def " in line]
    return "\n".join(hits)


STEPS: tuple[Step, ...] = (
    Step(
        "Bash",
        "find engine -name '*.py' | sort | head -80",
        {"command": "find engine -name '*.py' | sort | head -80", "description": "List modules"},
        _find,
    ),
    Step(
        "Read",
        "cat -n engine/server/anthropic/translate.py | head -200",
        {"file_path": "engine/server/anthropic/translate.py", "limit": 200},
        _read,
    ),
    Step(
        "Bash",
        "grep -n 'def ' engine/server/anthropic/protocol.py",
        {
            "command": "grep -n 'def ' engine/server/anthropic/protocol.py",
            "description": "Find functions",
        },
        _grep,
    ),
    Step(
        "Bash",
        "find engine -name '*.py' | sort | head -80",
        {"command": "find engine -name '*.py' | sort | head -80", "description": "List again"},
        _find,
    ),
)


def load_bodies(file: str, names: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """The POST bodies of a capture file in ``CAPTURES``, optionally only the named ones."""
    requests = json.loads((CAPTURES / file).read_text(encoding="utf-8"))["requests"]
    return [
        json.loads(r["body"])
        for r in requests
        if r["method"] == "POST" and (names is None or r.get("name") in names)
    ]


def _drop_cache_control(messages: list[dict[str, Any]]) -> None:
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict):
                    block.pop("cache_control", None)


def next_claude_turn(body: dict[str, Any], call_id: str, step: Step, output: str) -> dict[str, Any]:
    """Claude Code's next request after ``body``: its messages, the assistant's ``tool_use``,
    and the user turn with the ``tool_result`` (the only block marked ``cache_control``)."""
    out = copy.deepcopy(body)
    _drop_cache_control(out["messages"])
    out["messages"].append(
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": call_id, "name": step.name, "input": step.arguments}
            ],
        }
    )
    out["messages"].append(
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": output,
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        }
    )
    return out


def next_codex_turn(body: dict[str, Any], call_id: str, step: Step, output: str) -> dict[str, Any]:
    """Codex's next request after ``body``: its input, a ``function_call`` to
    ``exec_command`` and that call's ``function_call_output``."""
    out = copy.deepcopy(body)
    arguments = json.dumps({"cmd": step.codex_cmd, "workdir": "/tmp/codexcap/work"})
    out["input"].append(
        {
            "type": "function_call",
            "name": "exec_command",
            "arguments": arguments,
            "call_id": call_id,
        }
    )
    out["input"].append({"type": "function_call_output", "call_id": call_id, "output": output})
    return out


def session(agent: Agent, turns: int, max_tokens: int, root: Path = ROOT) -> list[dict[str, Any]]:
    """The request bodies of a ``turns``-turn session of ``agent``.

    Each body is the captured one with only two fields changed, the same on every turn:
    the output cap (``max_tokens`` / ``max_output_tokens``) and ``temperature`` 0, so both
    servers do the same work. Raises ``ValueError`` for more turns than ``STEPS`` covers.
    """
    if agent == "claude":
        bodies = load_bodies("claude_code_tool_search.json", ("search", "loaded"))
        grow = next_claude_turn
    else:
        bodies = load_bodies("codex.json", ("default",))
        grow = next_codex_turn
    if turns < 1 or turns > len(bodies) + len(STEPS):
        raise ValueError(f"turns must be 1..{len(bodies) + len(STEPS)} for {agent}")
    steps = iter(STEPS)
    while len(bodies) < turns:
        step = next(steps)
        call_id = f"{'toolu' if agent == 'claude' else 'call'}_replay{len(bodies)}"
        bodies.append(grow(bodies[-1], call_id, step, step.output(root)))
    bodies = bodies[:turns]
    for body in bodies:
        body["temperature"] = 0
        if agent == "claude":
            body["max_tokens"] = max_tokens
        else:
            body["max_output_tokens"] = max_tokens
    return bodies


def endpoint(agent: Agent) -> str:
    """The path each agent posts to (both servers serve both)."""
    return "/v1/messages" if agent == "claude" else "/v1/responses"
