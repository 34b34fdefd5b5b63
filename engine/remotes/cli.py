"""``sidelight remote add NAME URL [--api-key KEY]``, ``remote list``, ``remote rm NAME``.

This module is command-line output (``print``). A running server reads the registry again
when the file changes (``engine.server.remote.catalog``), so no restart is needed. Keys are
never printed: ``list`` says whether a remote has one.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from engine.remotes.registry import (
    RemoteError,
    add_remote,
    load_remotes,
    remotes_path,
    remove_remote,
)
from engine.settings import Settings


def add_remote_command(sub: Any) -> None:
    """Register ``remote`` and its subcommands on the ``sidelight`` parser's subparsers."""
    remote = sub.add_parser(
        "remote", help="other OpenAI-compatible servers whose models are served as MODEL@NAME"
    )
    actions = remote.add_subparsers(dest="remote_command", required=True)
    add = actions.add_parser("add", help="register a remote (replaces one of the same name)")
    add.add_argument("name", help="a short name: a-z, 0-9, '.', '_', '-'")
    add.add_argument("url", help="its base URL, e.g. http://workstation:11680 (http or https)")
    add.add_argument("--api-key", help="sent to this remote only, as 'Authorization: Bearer'")
    listing = actions.add_parser("list", help="the registered remotes (keys are not shown)")
    listing.add_argument("--json", action="store_true", help="print JSON")
    rm = actions.add_parser("rm", help="forget a remote")
    rm.add_argument("name")


def run_remote_command(settings: Settings, args: argparse.Namespace) -> int:
    path = remotes_path(settings.paths.config_dir)
    try:
        if args.remote_command == "add":
            remote = add_remote(path, args.name, args.url, args.api_key)
            key = " (with an API key)" if remote.api_key else ""
            print(f"added {remote.name}: {remote.url}{key}; its models are MODEL@{remote.name}")
            return 0
        if args.remote_command == "rm":
            if not remove_remote(path, args.name):
                print(f"sidelight: no remote named {args.name!r}", file=sys.stderr)
                return 1
            print(f"removed {args.name.strip().lower()}")
            return 0
        remotes = load_remotes(path)
    except RemoteError as exc:
        print(f"sidelight: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"sidelight: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([r.public() for r in remotes], indent=2))
    elif not remotes:
        print("no remotes (add one: sidelight remote add NAME URL [--api-key KEY])")
    for remote in [] if args.json else remotes:
        print(f"{remote.name}\t{remote.url}\t{'key set' if remote.api_key else 'no key'}")
    return 0
