"""The remotes registry: other OpenAI-compatible servers whose models Sidelight serves as
``MODEL@NAME`` (another Sidelight, OpenVINO Model Server, vLLM, llama-server).

A remote is a name, a base URL and an optional API key, kept in ``remotes.json`` in the
config folder. The file is written as the local API key's ``config.json`` is: atomically,
with 0600 permissions, because it may hold keys. A key is never logged (``Remote``'s repr
leaves it out) and is sent only to its own remote's URL.

Names are lowercase, ``[a-z0-9][a-z0-9._-]*`` up to 40 characters (never ``@``, which splits
``MODEL@NAME``); URLs are ``http`` or ``https`` with a host, no credentials, query or
fragment. Plain data and file I/O only: the CLI, the server and the desktop all read it.

Threading: the functions read or replace the file; callers on several threads or processes
see either the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REMOTES_FILE = "remotes.json"
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,39}")
MAX_REMOTES = 64  # a registry is a handful of servers; more is a mistake or an attack


class RemoteError(ValueError):
    """A remote's name, URL or key is not usable, or the registry cannot be read; the
    message says which and why."""


@dataclass(frozen=True)
class Remote:
    """One remote server. ``url`` is its base (``http://host:port``, with or without
    ``/v1``); :attr:`api_base` is where its OpenAI API lives."""

    name: str
    url: str
    api_key: str | None = field(default=None, repr=False)

    @property
    def api_base(self) -> str:
        """The base of its OpenAI paths: ``.../v1`` (added when the URL lacks it)."""
        base = self.url.rstrip("/")
        return base if base.endswith("/v1") else f"{base}/v1"

    def headers(self) -> dict[str, str]:
        """The headers every request to this remote carries (its own key only)."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def public(self) -> dict[str, Any]:
        """What may be shown (``remote list``, ``/health``): never the key itself."""
        return {"name": self.name, "url": self.url, "api_key": bool(self.api_key)}


def remotes_path(config_dir: Path) -> Path:
    return config_dir / REMOTES_FILE


def check_name(name: str) -> str:
    """The name in its stored form (lowercase, trimmed).

    Raises:
        RemoteError: empty, with ``@`` or a character outside ``[a-z0-9._-]``, or too long.
    """
    text = name.strip().lower()
    if not NAME_PATTERN.fullmatch(text):
        raise RemoteError(
            f"remote name {name!r}: use 1 to 40 of a-z, 0-9, '.', '_', '-', starting with a "
            "letter or digit (no '@': it separates MODEL@NAME)"
        )
    return text


def check_url(url: str) -> str:
    """The URL, trimmed, without a trailing slash.

    Raises:
        RemoteError: not ``http``/``https``, no host, or with credentials, a query or a
            fragment (a key goes in ``--api-key``, never in the URL, which is shown).
    """
    text = url.strip()
    try:
        parts = urlsplit(text)
        port = parts.port  # a bad port raises here
    except ValueError as exc:
        raise RemoteError(f"remote URL {text!r}: {exc}") from exc
    if parts.scheme not in ("http", "https"):
        raise RemoteError(f"remote URL {text!r}: only http:// and https:// URLs are served")
    if not parts.hostname:
        raise RemoteError(f"remote URL {text!r}: no host")
    if parts.username is not None or parts.password is not None:
        raise RemoteError("remote URL: put the key in --api-key, not in the URL (it is shown)")
    if parts.query or parts.fragment:
        raise RemoteError(f"remote URL {text!r}: no query or fragment, just the server's base")
    del port
    return text.rstrip("/")


def check_key(key: str | None) -> str | None:
    """A key that can travel in an HTTP header (printable ASCII, no spaces), or None.

    Raises:
        RemoteError: empty or with other characters.
    """
    if key is None:
        return None
    if not key or not all("!" <= ch <= "~" for ch in key):
        raise RemoteError("the remote's API key must be printable ASCII without spaces")
    return key


def split_model(name: str) -> tuple[str, str] | None:
    """``MODEL@NAME`` as ``(MODEL, name)`` (the last ``@`` splits; the name lowercased), or
    None when ``name`` names no remote."""
    model, at, remote = name.strip().rpartition("@")
    if not at or not model or not NAME_PATTERN.fullmatch(remote.lower()):
        return None
    return model, remote.lower()


def load_remotes(path: Path) -> list[Remote]:
    """The registered remotes, in the file's order (none when there is no file).

    Raises:
        RemoteError: the file cannot be read or holds something else than remotes.
    """
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RemoteError(f"cannot read {path}: {exc}") from exc
    items = data.get("remotes") if isinstance(data, dict) else None
    if not isinstance(items, list) or len(items) > MAX_REMOTES:
        raise RemoteError(f"{path} must hold {{'remotes': [...]}} (at most {MAX_REMOTES})")
    remotes: list[Remote] = []
    for item in items:
        if not isinstance(item, dict):
            raise RemoteError(f"{path}: every remote is an object")
        key = item.get("api_key")
        remotes.append(
            Remote(
                check_name(str(item.get("name", ""))),
                check_url(str(item.get("url", ""))),
                check_key(key if isinstance(key, str) else None),
            )
        )
    return remotes


def save_remotes(path: Path, remotes: list[Remote]) -> None:
    """Replace the registry atomically, readable by its owner only (it may hold keys).

    Raises:
        OSError: the file cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "remotes": [
            {"name": r.name, "url": r.url, **({"api_key": r.api_key} if r.api_key else {})}
            for r in remotes
        ]
    }
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(json.dumps(data, indent=2) + "\n")
    if os.name != "nt":
        os.chmod(tmp, 0o600)  # an older file kept its mode through O_TRUNC
    os.replace(tmp, path)


def add_remote(path: Path, name: str, url: str, api_key: str | None = None) -> Remote:
    """Register (or replace) a remote; returns it as stored.

    Raises:
        RemoteError: a bad name, URL or key, or too many remotes.
        OSError: the file cannot be written.
    """
    remote = Remote(check_name(name), check_url(url), check_key(api_key))
    others = [r for r in load_remotes(path) if r.name != remote.name]
    if len(others) >= MAX_REMOTES:
        raise RemoteError(f"at most {MAX_REMOTES} remotes")
    save_remotes(path, [*others, remote])
    return remote


def remove_remote(path: Path, name: str) -> bool:
    """Forget a remote; False when none has that name.

    Raises:
        RemoteError: a bad name or an unreadable file. OSError: it cannot be written.
    """
    wanted = check_name(name)
    remotes = load_remotes(path)
    kept = [r for r in remotes if r.name != wanted]
    if len(kept) == len(remotes):
        return False
    save_remotes(path, kept)
    return True
