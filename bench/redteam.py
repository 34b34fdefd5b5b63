"""A bounded red-team campaign against a running Sidelight server; prints a Markdown table.

Categories, in order (the destructive one last): Host-header rebinding, cross-origin simple
POSTs, slowloris, 10,000-deep JSON, large inputs (a 200,000-text ``/api/embed`` while a chat
waits), case-variant model names, hostile values (lone surrogates, huge seeds, junk JSON
schemas...), then a crash loop (the first payload that crashed the worker, up to three
times). Crafted GGUF files can be added with ``--gguf`` (see :func:`crafted_gguf`).

Columns: attempts; worker crashes (``/health`` ``restarts``, plus the crash after which the
engine gives up); permanent outage (``/health`` not ready ``--recovery`` seconds after the
category); Host/Origin bypasses (a request with an attacker's Host, or a cross-origin
simple POST, that was served); 5xx other than 501/503; bodies carrying a traceback or a
native source path. Notes say what was served, how long sockets stayed open, and so on.

Traffic goes only to ``http://127.0.0.1:PORT``; every loop is bounded in count and time.
Start a disposable server first, for example (the tiny embedding model in its store makes
the embedding categories bite)::

    SIDELIGHT_HOME=/tmp/redteam-home python -m engine.cli serve --port 11990
    python -m bench.redteam http://127.0.0.1:11990
"""

from __future__ import annotations

import argparse
import logging
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from bench.redteam_attacks import (
    Attack,
    Models,
    case_variants,
    chat_body,
    crash_loop,
    cross_origin,
    deep_json,
    host_rebinding,
    hostile_values,
    large_inputs,
    slowloris,
)
from bench.redteam_target import LEAK, Row, Target, crashes_between, table

logger = logging.getLogger("bench.redteam")

DEFAULT_IMPORT = f"{shlex.quote(sys.executable)} -m engine.cli import {{file}} --id {{id}}"


def run_category(target: Target, name: str, attack: Attack, models: Models, recovery: float) -> Row:
    """Run one category and read ``/health`` around it for crashes and outages."""
    row = Row(name)
    logger.info("category %s", name)
    before = target.health()
    started = time.monotonic()
    try:
        attack(target, row, models)
    except Exception as exc:  # a broken attack is a note, not the end of the campaign
        logger.exception("%s failed", name)
        row.note(f"attack aborted: {exc!r}")
    after = target.wait_ready(recovery)
    row.crashes = crashes_between(before, after or target.health())
    row.outage = after is None
    row.seconds = time.monotonic() - started
    return row


def crafted_gguf(files: Sequence[Path], import_command: str, timeout: float = 120.0) -> Attack:
    """The hook for crafted GGUF files: import each with ``import_command``, then chat with it.

    ``import_command`` is a shell-like template with ``{file}`` and ``{id}``; it must write
    into the target server's store (same ``SIDELIGHT_HOME``). An importer that dies of a
    signal, or prints a traceback, counts as a traceback in the table; a model that imports
    is then asked for two tokens, so a file that crashes the worker shows as a crash.
    """

    def attack(target: Target, row: Row, models: Models) -> None:
        for index, path in enumerate(files):
            model_id = f"redteam-gguf-{index}"
            argv = [
                part.format(file=str(path), id=model_id) for part in shlex.split(import_command)
            ]
            row.attempts += 1
            try:
                done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
            except subprocess.TimeoutExpired:
                row.note(f"{path.name}: import still running after {timeout:.0f} s")
                continue
            output = done.stdout + done.stderr
            if done.returncode < 0 or LEAK.search(output):
                row.leaks += 1
            row.note(f"{path.name}: import exit {done.returncode}")
            if done.returncode == 0:
                answer = target.send(row, "POST", "/v1/chat/completions", body=chat_body(model_id))
                row.note(f"{path.name}: chat {answer.status or answer.error}")

    return attack


def campaign(args: argparse.Namespace) -> list[Row]:
    target = Target(args.url)
    try:
        health = target.wait_ready(args.recovery)
        if health is None:
            raise SystemExit(f"{target.url} is not ready")
        models = Models(
            chat=str(health["model"]), embed=args.embed_model or _embedding_model(target)
        )
        categories: list[tuple[str, Attack]] = [
            ("Host rebinding", host_rebinding),
            ("cross-origin simple POST", cross_origin),
            ("slowloris", partial(slowloris, sockets=args.sockets, seconds=args.slow_seconds)),
            ("deep JSON (10,000 levels)", deep_json),
            ("large inputs", partial(large_inputs, inputs=args.embed_inputs, bound=args.bound)),
            ("case-variant model names", case_variants),
            ("hostile values", partial(hostile_values, recovery=args.recovery)),
        ]
        if args.gguf:
            categories.append(("crafted GGUF", crafted_gguf(args.gguf, args.import_command)))
        if not args.keep_alive:
            categories.append(
                ("crash loop (repeat a crasher)", partial(crash_loop, recovery=args.recovery))
            )
        if args.only:
            categories = [(n, a) for n, a in categories if args.only.lower() in n.lower()]
        rows: list[Row] = []
        for name, attack in categories:
            if any(row.outage for row in rows):
                rows.append(Row(name, notes=["skipped: the server is down"]))
            else:
                rows.append(run_category(target, name, attack, models, args.recovery))
        return rows
    finally:
        target.close()


def _embedding_model(target: Target) -> str | None:
    """A stored embedding model, if the server lists one."""
    try:
        cards = target.http.get("/v1/models").json()["data"]
    except Exception:
        return None
    return next((str(c["id"]) for c in cards if c.get("task") == "embeddings"), None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("url", help="the server, http://127.0.0.1:PORT")
    parser.add_argument("--recovery", type=float, default=30.0, help="seconds to wait for ready")
    parser.add_argument("--sockets", type=int, default=256, help="slowloris sockets")
    parser.add_argument("--slow-seconds", type=float, default=20.0, help="slowloris duration")
    parser.add_argument("--embed-inputs", type=int, default=200_000, help="texts in the flood")
    parser.add_argument("--bound", type=float, default=60.0, help="seconds to wait for the flood")
    parser.add_argument("--embed-model", help="embedding model id (default: from /v1/models)")
    parser.add_argument("--gguf", type=Path, nargs="*", default=[], help="crafted GGUF files")
    parser.add_argument(
        "--import-command",
        default=DEFAULT_IMPORT,
        help="how to import a GGUF into the server's store ({file}, {id})",
    )
    parser.add_argument("--only", help="run only the categories whose name contains this")
    parser.add_argument(
        "--keep-alive", action="store_true", help="skip the crash loop, which may end the server"
    )
    args = parser.parse_args(argv)
    if not re.fullmatch(r"http://127\.0\.0\.1:\d+/?", args.url):
        parser.error("the campaign only attacks http://127.0.0.1:PORT")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    print(table(campaign(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
