"""Copy as curl: a shell command that sends a logged request again, without its secrets.

A request that carried an API key gets the placeholder ``$SIDELIGHT_API_KEY`` in the same
header (set that variable, or edit the line); the key itself was never stored. Only a
request whose body was kept can be replayed. The command is for a POSIX shell (bash, zsh;
Git Bash or WSL on Windows).
"""

from __future__ import annotations

import shlex

from engine.server.monitor.record import RequestEntry

API_KEY_VARIABLE = "SIDELIGHT_API_KEY"
_AUTH_LINES = {
    # Double quotes: the shell fills the variable in.
    "authorization": f'"Authorization: Bearer ${API_KEY_VARIABLE}"',
    "x-api-key": f'"x-api-key: ${API_KEY_VARIABLE}"',
}


def curl_command(entry: RequestEntry) -> str | None:
    """The command reproducing ``entry``, or ``None`` when its body was not kept."""
    replay = entry.replay
    if entry.body is None or replay is None:
        return None
    lines = [f"curl --no-buffer {shlex.quote(replay.url)}"]
    if replay.method != "POST":
        lines.append(f"-X {shlex.quote(replay.method)}")
    lines += [f"-H {shlex.quote(f'{name}: {value}')}" for name, value in replay.headers]
    if replay.auth_header is not None:
        lines.append(f"-H {_AUTH_LINES[replay.auth_header]}")
    lines.append(f"--data-binary {shlex.quote(entry.body)}")
    return " \\\n  ".join(lines)
